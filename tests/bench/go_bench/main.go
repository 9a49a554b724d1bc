// Go client benchmark (not a test; run by tests/bench/go_bench.py, which
// starts the cluster): the ringcache Go package against gomemcache over
// the same nodes, and against itself through one relaying node. For each
// operation (get, set, a 100-key GetMulti) every client runs -seconds, in
// alternating rounds, from -conc goroutines; prints `figure value` lines:
//
//	go_<op>_ops_<client>    calls per second (get_multi: calls of 100 keys), best round
//	go_<op>_ratio_<client>  ringcache's over <client>'s
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"ringcache.dev/ringcache"
)

// client is what the benchmark needs of either package.
type client struct {
	get   func(k string) error
	set   func(k string, v []byte) error
	multi func(ks []string) (int, error)
}

func rcClient(c *ringcache.Client) client {
	return client{
		get: func(k string) error { _, err := c.Get(k); return err },
		set: func(k string, v []byte) error { return c.Set(&ringcache.Item{Key: k, Value: v}) },
		multi: func(ks []string) (int, error) {
			m, err := c.GetMulti(ks)
			return len(m), err
		},
	}
}

func gmClient(c *memcache.Client) client {
	return client{
		get: func(k string) error { _, err := c.Get(k); return err },
		set: func(k string, v []byte) error { return c.Set(&memcache.Item{Key: k, Value: v}) },
		multi: func(ks []string) (int, error) {
			m, err := c.GetMulti(ks)
			return len(m), err
		},
	}
}

// run is op's calls per second on c from conc goroutines for d.
func run(c client, op string, keys []string, value []byte, conc int, d time.Duration) (float64, error) {
	var n int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			i := g * 7919
			for time.Now().Before(end) {
				for j := 0; j < 20; j++ {
					i++
					var err error
					switch op {
					case "get":
						err = c.get(keys[i%len(keys)])
					case "set":
						err = c.set(keys[i%len(keys)], value)
					default:
						s := (i * 100) % (len(keys) - 100)
						var got int
						got, err = c.multi(keys[s : s+100])
						if err == nil && got != 100 {
							err = fmt.Errorf("get_multi: %d of 100 keys", got)
						}
					}
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
				atomic.AddInt64(&n, 20)
			}
		}(g)
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return 0, e.(error)
	}
	return float64(n) / d.Seconds(), nil
}

func main() {
	members := flag.String("members", "", "the cluster's membership file (ringcache)")
	servers := flag.String("servers", "", "the nodes, comma separated (gomemcache)")
	relay := flag.String("relay", "", "one node, for a plain memcached client (gomemcache) that it relays for")
	seconds := flag.Float64("seconds", 2, "per client, op and round")
	rounds := flag.Int("rounds", 3, "alternating rounds")
	nkeys := flag.Int("keys", 10000, "keys")
	size := flag.Int("value-size", 100, "value bytes")
	conc := flag.Int("conc", 1, "goroutines per client")
	flag.Parse()
	rc, err := ringcache.NewFromMembersFile(*members, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "go_bench:", err)
		os.Exit(1)
	}
	nodes := strings.Split(*servers, ",")
	gm := memcache.New(nodes...)
	gm.Timeout = time.Second
	// A plain memcached client of one node: it relays keys it does not own.
	rl := memcache.New(*relay)
	rl.Timeout = time.Second
	names := []string{"ringcache", "gomemcache", "relay1"}
	clients := map[string]client{"ringcache": rcClient(rc), "gomemcache": gmClient(gm), "relay1": gmClient(rl)}
	keys := make([]string, *nkeys)
	value := make([]byte, *size)
	for i := range keys {
		keys[i] = fmt.Sprintf("gobench:%d", i)
		if err := rc.Set(&ringcache.Item{Key: keys[i], Value: value}); err != nil {
			fmt.Fprintln(os.Stderr, "go_bench: fill:", err)
			os.Exit(1)
		}
	}
	ops := []string{"get", "set", "get_multi"}
	best := map[string]float64{}
	d := time.Duration(*seconds * float64(time.Second))
	for r := 0; r < *rounds; r++ {
		for _, op := range ops {
			for _, name := range names {
				v, err := run(clients[name], op, keys, value, *conc, d)
				if err != nil {
					fmt.Fprintf(os.Stderr, "go_bench: %s %s: %v\n", name, op, err)
					os.Exit(1)
				}
				if v > best[op+"/"+name] {
					best[op+"/"+name] = v
				}
			}
		}
	}
	for _, op := range ops {
		for _, name := range names {
			fmt.Printf("go_%s_ops_%s %.0f\n", op, name, best[op+"/"+name])
		}
		for _, name := range names[1:] {
			fmt.Printf("go_%s_ratio_%s %.2f\n", op, name, best[op+"/ringcache"]/best[op+"/"+name])
		}
	}
}
