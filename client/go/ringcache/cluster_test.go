// Cluster changes under the Go client, driven by tests/it/test_go_client.py
// through "RCSTEP ..." lines (RC_GO_STEPS=1): a join and a leave under a
// running load (no miss of an acknowledged key, no read behind one), and
// a killed node with every key still read.
package ringcache_test

import (
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ringcache.dev/ringcache"
)

// load: writers set keys to increasing sequence numbers and record what
// was acknowledged; readers GetMulti batches and check that a key whose
// write was acknowledged is never a miss nor older than that write.
type load struct {
	c     *ringcache.Client
	keys  []string
	mu    sync.Mutex
	acked map[string]int
	tried map[string]int
	errs  []string
	w, r  int64
	wfail int64
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newLoad(c *ringcache.Client, n int) *load {
	l := &load{c: c, acked: map[string]int{}, tried: map[string]int{}, stop: make(chan struct{})}
	for i := 0; i < n; i++ {
		l.keys = append(l.keys, fmt.Sprintf("ld:%d", i))
	}
	return l
}

func (l *load) writer(part, parts int) {
	defer l.wg.Done()
	for seq := 1; ; seq++ {
		for i := part; i < len(l.keys); i += parts {
			select {
			case <-l.stop:
				return
			default:
			}
			k := l.keys[i]
			l.mu.Lock()
			l.tried[k] = seq
			l.mu.Unlock()
			if err := l.c.Set(&ringcache.Item{Key: k, Value: []byte(strconv.Itoa(seq))}); err != nil {
				atomic.AddInt64(&l.wfail, 1) // indeterminate: may be applied
				continue
			}
			l.mu.Lock()
			l.acked[k] = seq
			l.mu.Unlock()
			atomic.AddInt64(&l.w, 1)
		}
	}
}

func (l *load) reader(seed int64) {
	defer l.wg.Done()
	rnd := rand.New(rand.NewSource(seed))
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		floor := map[string]int{}
		var batch []string
		l.mu.Lock()
		for j := 0; j < 20; j++ {
			k := l.keys[rnd.Intn(len(l.keys))]
			if s, ok := l.acked[k]; ok {
				if _, dup := floor[k]; !dup {
					batch = append(batch, k)
				}
				floor[k] = s
			}
		}
		l.mu.Unlock()
		if len(batch) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		m, err := l.c.GetMulti(batch)
		atomic.AddInt64(&l.r, 1)
		l.mu.Lock()
		for _, k := range batch {
			if err != nil {
				l.errs = append(l.errs, fmt.Sprintf("GetMulti: %v", err))
				break
			}
			if msg := l.check(k, floor[k], m[k]); msg != "" {
				l.errs = append(l.errs, msg)
			}
		}
		l.mu.Unlock()
	}
}

// check: the value read for k is at least lo and at most the last write
// tried ("" when so); l.mu held.
func (l *load) check(k string, lo int, it *ringcache.Item) string {
	if it == nil {
		return fmt.Sprintf("%s: miss (acknowledged %d)", k, lo)
	}
	v, _ := strconv.Atoi(string(it.Value))
	if v < lo || v > l.tried[k] {
		return fmt.Sprintf("%s: read %d, acknowledged %d, tried %d", k, v, lo, l.tried[k])
	}
	return ""
}

func (l *load) ops() int64 { return atomic.LoadInt64(&l.w) + atomic.LoadInt64(&l.r) }

// waitOps waits for n more operations (30 s at most).
func (l *load) waitOps(t *testing.T, n int64) {
	from := l.ops()
	if !waitFor(30*time.Second, func() bool { return l.ops() >= from+n }) {
		t.Errorf("the load stalled: %d operations in 30 s, want %d", l.ops()-from, n)
	}
}

func steps(t *testing.T) {
	if env(t, "RC_GO_STEPS") != "1" {
		t.Skip("RC_GO_STEPS is not 1")
	}
}

func TestJoinLeave(t *testing.T) {
	steps(t)
	c := client(t)
	defer c.Close()
	l := newLoad(c, 200)
	for p := 0; p < 4; p++ {
		l.wg.Add(1)
		go l.writer(p, 4)
	}
	for r := 0; r < 4; r++ {
		l.wg.Add(1)
		go l.reader(int64(r))
	}
	l.waitOps(t, 1000)
	if a := step(t, "join"); a != "ok" {
		t.Errorf("join: %s", a)
	}
	l.waitOps(t, 1000)
	if !waitFor(10*time.Second, func() bool { return c.Epoch() == 2 }) {
		t.Errorf("the client did not adopt epoch 2: %d", c.Epoch())
	}
	if a := step(t, "leave"); a != "ok" {
		t.Errorf("leave: %s", a)
	}
	l.waitOps(t, 1000)
	if !waitFor(10*time.Second, func() bool { return c.Epoch() == 3 }) {
		t.Errorf("the client did not adopt epoch 3: %d", c.Epoch())
	}
	close(l.stop)
	l.wg.Wait()
	t.Logf("load: %d writes acknowledged, %d indeterminate, %d multi-gets", l.w, l.wfail, l.r)
	if l.w < 2000 || l.r < 200 {
		t.Errorf("the load did not run: %d writes, %d reads", l.w, l.r)
	}
	if len(l.errs) > 0 {
		t.Errorf("%d reads missed or went behind an acknowledged write, e.g. %v", len(l.errs), l.errs[:min(len(l.errs), 10)])
	}
	var keys []string
	for k := range l.acked {
		keys = append(keys, k)
	}
	m, err := c.GetMulti(keys)
	if err != nil {
		t.Fatalf("final GetMulti: %v", err)
	}
	bad := 0
	for _, k := range keys {
		if msg := l.check(k, l.acked[k], m[k]); msg != "" {
			if bad < 10 {
				t.Errorf("after the leave: %s", msg)
			}
			bad++
		}
	}
	nodes, _ := c.Nodes()
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.ID)
	}
	if fmt.Sprint(ids) != "[a c d]" {
		t.Errorf("the client routes with %v, want a c d", ids)
	}
}

func TestKill(t *testing.T) {
	steps(t)
	c, err := ringcache.NewFromMembersFile(env(t, "RC_GO_MEMBERS"), &ringcache.Options{
		Timeout: time.Second, ConnectTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := map[string]string{}
	var keys []string
	onC := ""
	for i := 0; i < 300; i++ {
		k := fmt.Sprintf("kill:%d", i)
		want[k] = fmt.Sprintf("v%d", i)
		keys = append(keys, k)
		mustSet(t, c, &ringcache.Item{Key: k, Value: []byte(want[k])})
		if o, _ := c.Locate(k); onC == "" && o[0] == "c" {
			onC = k
		}
	}
	if a := step(t, "stop c"); a != "ok" {
		t.Fatalf("stop c: %s", a)
	}
	// A stalled primary: the read waits for its timeout, then fails over.
	t0 := time.Now()
	if getVal(t, c, onC) != want[onC] {
		t.Errorf("a key of the stalled node c read from its replica")
	}
	t.Logf("read with c stalled: %v", time.Since(t0))
	if a := step(t, "kill c"); a != "ok" {
		t.Fatalf("kill c: %s", a)
	}
	t0 = time.Now()
	m, err := c.GetMulti(keys)
	if err != nil || len(m) != len(keys) {
		t.Errorf("node c killed: GetMulti read %d of %d keys (%v)", len(m), len(keys), err)
	}
	for _, k := range keys {
		it, err := c.Get(k)
		if err != nil || string(it.Value) != want[k] {
			t.Fatalf("node c killed: Get(%q): %v", k, err)
		}
	}
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("reads waited on the dead node: %v", d)
	}
	nodes, _ := c.Nodes()
	down := false
	for _, n := range nodes {
		if n.ID == "c" && n.Down {
			down = n.LastError != 0
		}
	}
	if !down {
		t.Errorf("the client does not mark c down: %+v", nodes)
	}
	// A write to a key whose primary is the dead node, before any
	// failover: the replica sends it back to c (MOVED) or refuses it
	// (UNAVAILABLE) once it sees c down, so it is refused as unavailable
	// (retry after the failover), not acknowledged, and not reported as a
	// redirect loop (CodeMoved). The key then reads its old value or, on
	// the connection the replica redirected, a miss: never the refused one.
	err = c.Set(&ringcache.Item{Key: onC, Value: []byte("after")})
	if e, ok := err.(*ringcache.Error); !ok || e.Code != ringcache.CodeUnavailable {
		t.Errorf("Set to a key of the dead primary c: %v, want CodeUnavailable", err)
	}
	if it, err := c.Get(onC); err == nil && string(it.Value) != want[onC] {
		t.Errorf("after the refused write %s reads %q", onC, it.Value)
	} else if err != nil && err != ringcache.ErrCacheMiss {
		t.Errorf("after the refused write: Get(%s): %v", onC, err)
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// TestSecure: TLS (-Z) and logins (-Y) through Options, on the TLS
// cluster and the -Y seed nodes tests/it/test_go_client.py starts
// (RC_GO_TLS_MEMBERS, RC_GO_TLS_CA; RC_GO_AUTH_SEEDS, RC_GO_AUTH_USER,
// RC_GO_AUTH_PASSWORD).
func TestSecure(t *testing.T) {
	tlsOpts := &ringcache.Options{TLS: true, TLSCAFile: env(t, "RC_GO_TLS_CA"), Timeout: 2 * time.Second}
	c, err := ringcache.NewFromMembersFile(env(t, "RC_GO_TLS_MEMBERS"), tlsOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkSome(t, c, "tls")
	if err := c.FlushAll(); err != nil {
		t.Errorf("TLS: FlushAll: %v", err)
	} else if _, err := c.Get("tls:1"); err != ringcache.ErrCacheMiss {
		t.Errorf("TLS: after FlushAll: %v", err)
	}
	skip := *tlsOpts
	skip.TLSSkipNameCheck = true
	if s, err := ringcache.NewFromMembersFile(env(t, "RC_GO_TLS_MEMBERS"), &skip); err != nil || s.FlushAll() != nil {
		t.Errorf("TLS with TLSSkipNameCheck: %v", err)
	}
	plain, _ := ringcache.NewFromMembersFile(env(t, "RC_GO_TLS_MEMBERS"), &ringcache.Options{
		Timeout: 500 * time.Millisecond, ConnectTimeout: 200 * time.Millisecond})
	if err := plain.Set(&ringcache.Item{Key: "tls:x", Value: []byte("v")}); err == nil {
		t.Errorf("no TLS against -Z nodes: no error")
	} else {
		t.Logf("no TLS against -Z nodes: %v", err)
	}

	seeds := strings.Split(env(t, "RC_GO_AUTH_SEEDS"), ",")
	a, err := ringcache.NewFromServers(seeds, &ringcache.Options{Username: env(t, "RC_GO_AUTH_USER"),
		Password: env(t, "RC_GO_AUTH_PASSWORD")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if n, _ := a.Nodes(); len(n) != 3 {
		t.Errorf("login: %d seed nodes, want 3", len(n))
	}
	checkSome(t, a, "auth")
	if err := a.FlushAll(); err != nil {
		t.Errorf("login: FlushAll: %v", err)
	} else if _, err := a.Get("auth:1"); err != ringcache.ErrCacheMiss {
		t.Errorf("login: after FlushAll: %v", err)
	}
	bad, _ := ringcache.NewFromServers(seeds, &ringcache.Options{Username: "nobody", Password: "nope"})
	err = bad.Set(&ringcache.Item{Key: "auth:x", Value: []byte("v")})
	var re *ringcache.Error
	if !errors.As(err, &re) || re.Code != ringcache.CodeAuth {
		t.Errorf("a wrong password: %v, want CodeAuth", err)
	}
}

// checkSome: 100 keys set, read by GetMulti and GetOrCompute.
func checkSome(t *testing.T, c *ringcache.Client, prefix string) {
	var keys []string
	for i := 0; i < 100; i++ {
		k := fmt.Sprintf("%s:%d", prefix, i)
		keys = append(keys, k)
		if err := c.Set(&ringcache.Item{Key: k, Value: []byte(k)}); err != nil {
			t.Fatalf("%s: Set: %v", prefix, err)
		}
	}
	m, err := c.GetMulti(keys)
	if err != nil || len(m) != 100 {
		t.Errorf("%s: GetMulti: %d of 100, %v", prefix, len(m), err)
	}
	it, err := c.GetOrCompute(prefix+":goc", 10, func(string) ([]byte, uint32, error) { return []byte("c"), 0, nil })
	if err != nil || string(it.Value) != "c" {
		t.Errorf("%s: GetOrCompute: %v", prefix, err)
	}
}
