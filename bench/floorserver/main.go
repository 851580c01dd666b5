// Command floor is the cheapest server an aggregator can proxy to: it answers discovery for
// floor.kosmos.io/v1alpha1 and every other GET with one fixed object, read once at start.
//
// The benchmark registers it behind the same host aggregator as vc-apiserver, so the get
// workload through the aggregator can be compared with what no backend can beat: the host's own
// work (authentication, authorization, the proxy hop) plus the least a backend can do. It speaks
// HTTP/1.1 over TLS, as vc-apiserver does, and authenticates nobody.
package main

import (
	"crypto/tls"
	"flag"
	"log"
	"net/http"
	"os"
	"strconv"
)

const discovery = `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"floor.kosmos.io/v1alpha1",` +
	`"resources":[{"name":"virtualclusters","singularName":"virtualcluster","namespaced":true,` +
	`"kind":"VirtualCluster","verbs":["get"]}]}`

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	cert := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	key := flag.String("tls-private-key-file", "", "serving key (PEM)")
	bodyFile := flag.String("body", "", "the JSON object every GET returns")
	flag.Parse()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		log.Fatalf("reading --body: %v", err)
	}
	length := strconv.Itoa(len(body))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/floor.kosmos.io/v1alpha1", "/apis/floor.kosmos.io/v1alpha1/":
			_, _ = w.Write([]byte(discovery))
		case "/healthz", "/readyz":
			_, _ = w.Write([]byte("ok"))
		default:
			h.Set("Content-Length", length)
			_, _ = w.Write(body)
		}
	})
	server := &http.Server{
		Addr:    *addr,
		Handler: handler,
		// HTTP/1.1 only, like vc-apiserver: the aggregator then proxies to both the same way.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
