// Command floor is the floor of `sluice bench`'s CPU per decision: a
// net/http server that answers POST /v1/check with a constant decision and
// does nothing else, and reports its CPU time at /metrics as
// process_cpu_seconds_total. What sluice serve spends above it is Sluice's.
//
//	go run ./floor 127.0.0.1:18095 &
//	sluice bench --url http://127.0.0.1:18095
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"syscall"
	"time"
)

const decision = `{"allowed":true,"policy":"bench","limit":1000000,"remaining":999999,"resetAt":1795256460,"retryAfter":0,"retryAfterMs":0,"decisions":[{"policy":"bench","allowed":true,"limit":1000000,"remaining":999999,"resetAt":1795256460,"retryAfter":0,"retryAfterMs":0}]}` + "\n"

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: floor ADDR")
	}
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, decision)
	})
	m.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		fmt.Fprintf(w, "process_cpu_seconds_total %f\n", float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9)
	})
	srv := &http.Server{Addr: os.Args[1], Handler: m, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
