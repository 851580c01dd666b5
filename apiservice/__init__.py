"""How vc-apiserver is registered and deployed on a host cluster.

``deploy/`` holds the kustomize manifests (``base``, overlays ``cluster`` and ``local``);
``python -m apiservice`` renders them from those same files, creates the certificates and
installs or uninstalls them with kubectl.
"""
