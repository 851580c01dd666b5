// Command floor is the cheapest server an aggregator can proxy to: it answers discovery for
// floor.kosmos.io/v1alpha1 and every other GET of an object with one fixed object, read once at
// start; and it serves the watch fan-out with the least work a backend can do.
//
// The benchmark registers it behind the same host aggregator as vc-apiserver, so the get and
// watch workloads through the aggregator can be compared with what no backend can beat: the
// host's own work (authentication, authorization, the proxy hop) plus the least a backend can do.
// It speaks HTTP/1.1 over TLS unless told to offer HTTP/2 too (vc-apiserver offers both), and
// authenticates nobody.
//
// For the watch workload it keeps the objects it is given (POST stores the body as is, so the
// benchmark can copy vc-apiserver's own objects here and the events are the same size and shape)
// and answers a merge PATCH of one with the patched object under the next resourceVersion; once
// that answer is flushed, the same object goes to every open watch as a MODIFIED event. There
// is no storage and no history: a watch sees the writes made after it started, which is all the
// workload asks. Each watch writes its queued events and flushes once its queue is empty, as
// kube-apiserver does.
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	groupVersion = "floor.kosmos.io/v1alpha1"
	discovery    = `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"` + groupVersion + `",` +
		`"resources":[{"name":"virtualclusters","singularName":"virtualcluster","namespaced":true,` +
		`"kind":"VirtualCluster","verbs":["create","get","list","patch","watch"]}]}`
	// queued is how many events a watch may fall behind before it is closed, as kube-apiserver
	// closes a watcher whose buffer stays full (the benchmark's watchers then resume).
	queued = 1000
)

// hub holds the objects written through the floor and the open watches.
type hub struct {
	mu       sync.Mutex
	rv       uint64
	objects  map[string]map[string]any // "namespace/name" -> object
	watchers map[chan []byte]struct{}
}

func newHub() *hub {
	return &hub{rv: 1, objects: map[string]map[string]any{}, watchers: map[chan []byte]struct{}{}}
}

// encode writes v as compact JSON without HTML escaping: the bytes a Kubernetes server would send.
func encode(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// mergePatch applies an RFC 7386 JSON merge patch to target in place.
func mergePatch(target, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(target, k)
			continue
		}
		if pv, ok := v.(map[string]any); ok {
			tv, ok := target[k].(map[string]any)
			if !ok {
				tv = map[string]any{}
				target[k] = tv
			}
			mergePatch(tv, pv)
			continue
		}
		target[k] = v
	}
}

// create stores obj as given under its metadata's namespace and name.
func (h *hub) create(obj map[string]any) {
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	h.mu.Lock()
	h.objects[ns+"/"+name] = obj
	h.mu.Unlock()
}

// patch merges patch into the stored object, gives it the next resourceVersion and returns its
// encoding, or nil if there is no such object.
func (h *hub) patch(key string, patch map[string]any) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	obj, ok := h.objects[key]
	if !ok {
		return nil
	}
	mergePatch(obj, patch)
	h.rv++
	obj["metadata"].(map[string]any)["resourceVersion"] = strconv.FormatUint(h.rv, 10)
	return encode(obj)
}

// publish queues one event line for every open watch; a watch that is queued full is closed.
func (h *hub) publish(line []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.watchers {
		select {
		case ch <- line:
		default:
			delete(h.watchers, ch)
			close(ch)
		}
	}
}

func (h *hub) subscribe() chan []byte {
	ch := make(chan []byte, queued)
	h.mu.Lock()
	h.watchers[ch] = struct{}{}
	h.mu.Unlock()
	return ch
}

func (h *hub) unsubscribe(ch chan []byte) {
	h.mu.Lock()
	if _, ok := h.watchers[ch]; ok {
		delete(h.watchers, ch)
		close(ch)
	}
	h.mu.Unlock()
}

func (h *hub) resourceVersion() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strconv.FormatUint(h.rv, 10)
}

// watch streams events to one client until it leaves, the floor closes it or timeoutSeconds ends.
func (h *hub) watch(w http.ResponseWriter, r *http.Request) {
	timeout := 30 * time.Minute
	if s, err := strconv.Atoi(r.URL.Query().Get("timeoutSeconds")); err == nil && s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	ch := h.subscribe()
	defer h.unsubscribe(ch)
	flusher := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-ch:
			if !ok {
				return
			}
			if _, err := w.Write(line); err != nil {
				return
			}
			if len(ch) == 0 {
				flusher.Flush()
			}
		case <-r.Context().Done():
			return
		case <-timer.C:
			return
		}
	}
}

// objectKey is "namespace/name" of .../namespaces/{namespace}/virtualclusters/{name}, or "".
func objectKey(path string) string {
	parts := strings.Split(strings.TrimPrefix(path, "/apis/"+groupVersion+"/"), "/")
	if len(parts) != 4 || parts[0] != "namespaces" || parts[2] != "virtualclusters" {
		return ""
	}
	return parts[1] + "/" + parts[3]
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	cert := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	key := flag.String("tls-private-key-file", "", "serving key (PEM)")
	bodyFile := flag.String("body", "", "the JSON object every GET of an object returns")
	http2 := flag.Bool("http2", false, "offer HTTP/2 by ALPN, as vc-apiserver does: what the hop "+
		"would cost with one multiplexed connection instead of one per watch")
	flag.Parse()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		log.Fatalf("reading --body: %v", err)
	}
	length := strconv.Itoa(len(body))
	h := newHub()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := w.Header()
		header.Set("Content-Type", "application/json")
		path := r.URL.Path
		switch {
		case path == "/apis/"+groupVersion || path == "/apis/"+groupVersion+"/":
			_, _ = w.Write([]byte(discovery))
		case path == "/healthz" || path == "/readyz":
			_, _ = w.Write([]byte("ok"))
		case r.Method == http.MethodGet && strings.HasSuffix(path, "/virtualclusters"):
			if q := r.URL.Query().Get("watch"); q == "true" || q == "1" {
				h.watch(w, r)
				return
			}
			_, _ = w.Write([]byte(`{"kind":"VirtualClusterList","apiVersion":"` + groupVersion +
				`","metadata":{"resourceVersion":"` + h.resourceVersion() + `"},"items":[]}`))
		case r.Method == http.MethodPost:
			var obj map[string]any
			raw, _ := io.ReadAll(r.Body)
			if json.Unmarshal(raw, &obj) != nil {
				http.Error(w, "not a JSON object", http.StatusBadRequest)
				return
			}
			h.create(obj)
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(raw)
		case r.Method == http.MethodPatch:
			var patch map[string]any
			if json.NewDecoder(r.Body).Decode(&patch) != nil {
				http.Error(w, "not a JSON merge patch", http.StatusBadRequest)
				return
			}
			obj := h.patch(objectKey(path), patch)
			if obj == nil {
				http.Error(w, "not found", http.StatusNotFound)
				return
			}
			header.Set("Content-Length", strconv.Itoa(len(obj)))
			_, _ = w.Write(obj)
			w.(http.Flusher).Flush()
			h.publish(append(append(append([]byte(`{"type":"MODIFIED","object":`), obj...), '}'), '\n'))
		default:
			header.Set("Content-Length", length)
			_, _ = w.Write(body)
		}
	})
	server := &http.Server{Addr: *addr, Handler: handler}
	if !*http2 {
		// HTTP/1.1 only: the aggregator opens a connection per request in flight or watch.
		server.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
