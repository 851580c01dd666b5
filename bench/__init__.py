"""Side-by-side benchmarks: vc-apiserver against kube-apiserver serving the same resource as a CRD.

``python -m bench`` (or ``make bench``) starts both servers on loopback, each with its own etcd,
drives them with one load generator in alternating rounds, and writes the results to
``bench/results/latest.json``, ``docs/benchmarks.md`` and ``docs/benchmarks.png``.
"""
