module kosmos.io/vc-apiserver/bench/floor

go 1.25
