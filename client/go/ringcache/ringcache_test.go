// Tests of the Go package on a real ringcached cluster, started and driven
// by tests/it/test_go_client.py, which passes it in the environment:
// RC_GO_MEMBERS (its active.members), RC_GO_SEEDS (node addresses, comma
// separated), RC_GO_RINGCTL, RC_GO_VECTORS (tests/vectors/ring-v1) and
// RC_GO_STEPS=1 when it answers the "RCSTEP ..." lines this test prints
// (a node to kill, a join, a leave) on stdin. Without them, tests skip.
package ringcache_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ringcache.dev/ringcache"
)

func env(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set: run through tests/it/test_go_client.py (it starts a cluster)", name)
	}
	return v
}

func client(t *testing.T) *ringcache.Client {
	c, err := ringcache.NewFromMembersFile(env(t, "RC_GO_MEMBERS"), &ringcache.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("NewFromMembersFile: %v", err)
	}
	return c
}

// waitFor polls cond every 50 ms until it holds or the deadline passes.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

var stdin = bufio.NewReader(os.Stdin)

// step asks the driver to do something to the cluster and waits for its
// answer line.
func step(t *testing.T, what string) string {
	fmt.Printf("RCSTEP %s\n", what)
	line, err := stdin.ReadString('\n')
	if err != nil {
		t.Fatalf("step %q: no answer from the driver: %v", what, err)
	}
	return strings.TrimSpace(line)
}

func mustSet(t *testing.T, c *ringcache.Client, it *ringcache.Item) {
	t.Helper()
	if err := c.Set(it); err != nil {
		t.Fatalf("Set(%q): %v", it.Key, err)
	}
}

func getVal(t *testing.T, c *ringcache.Client, key string) string {
	t.Helper()
	it, err := c.Get(key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return string(it.Value)
}

func TestConstructors(t *testing.T) {
	seeds := strings.Split(env(t, "RC_GO_SEEDS"), ",")
	c := ringcache.New(seeds...)
	if err := c.Set(&ringcache.Item{Key: "ctor:a", Value: []byte("1")}); err != nil {
		t.Fatalf("New(seeds).Set: %v", err)
	}
	if e := c.Epoch(); e != 1 {
		t.Errorf("New(seeds): epoch %d, want 1 (the cluster's membership learnt)", e)
	}
	if n, _ := c.Nodes(); len(n) != 3 {
		t.Errorf("New(seeds): %d nodes, want 3", len(n))
	}
	c.Close()
	if err := ringcache.New().Set(&ringcache.Item{Key: "x", Value: []byte("1")}); err != ringcache.ErrNoServers {
		t.Errorf("New(): %v, want ErrNoServers", err)
	}
	if _, err := ringcache.NewFromServers(nil, nil); err != ringcache.ErrNoServers {
		t.Errorf("NewFromServers(nil): %v, want ErrNoServers", err)
	}
	s, err := ringcache.NewFromStore(filepath.Dir(env(t, "RC_GO_MEMBERS")), nil)
	if err != nil || getVal(t, s, "ctor:a") != "1" {
		t.Errorf("NewFromStore(dir): %v", err)
	}
	if _, err := ringcache.NewFromStore("etcd://127.0.0.1:1/x", nil); err == nil {
		t.Errorf("NewFromStore(etcd://): no error")
	}
	if _, err := ringcache.NewFromMembersFile("/nonexistent.members", nil); err == nil ||
		err.(*ringcache.Error).Code != ringcache.CodeMembers {
		t.Errorf("NewFromMembersFile(missing): %v, want CodeMembers", err)
	}
	bad := "epoch 1\nreplicas 2\nnode a 127.0.0.1:1 1\nnode a 127.0.0.1:2 1\n"
	if _, err := ringcache.NewFromMembersText(bad, "bad.members", nil); err == nil ||
		!strings.Contains(err.Error(), "bad.members") {
		t.Errorf("NewFromMembersText(duplicate id): %v, want an error naming bad.members", err)
	}
	// gomemcache's fields: read when the handle opens.
	f := ringcache.New(seeds...)
	f.Timeout = 300 * time.Millisecond
	f.MaxIdleConns = 1
	if getVal(t, f, "ctor:a") != "1" {
		t.Errorf("Timeout/MaxIdleConns set: get failed")
	}
}

func TestCalls(t *testing.T) {
	c := client(t)
	defer c.Close()
	if _, err := c.Get("p:none"); err != ringcache.ErrCacheMiss {
		t.Errorf("Get miss: %v, want ErrCacheMiss", err)
	}
	mustSet(t, c, &ringcache.Item{Key: "p:a", Value: []byte("1"), Flags: 42})
	it, err := c.Get("p:a")
	if err != nil || string(it.Value) != "1" || it.Flags != 42 || it.Key != "p:a" || it.CasID == 0 {
		t.Errorf("Get after Set: %+v %v", it, err)
	}
	if err := c.Add(&ringcache.Item{Key: "p:a", Value: []byte("x")}); err != ringcache.ErrNotStored {
		t.Errorf("Add present: %v, want ErrNotStored", err)
	}
	if err := c.Add(&ringcache.Item{Key: "p:b", Value: []byte("2")}); err != nil {
		t.Errorf("Add absent: %v", err)
	}
	if err := c.Replace(&ringcache.Item{Key: "p:none", Value: []byte("x")}); err != ringcache.ErrNotStored {
		t.Errorf("Replace absent: %v, want ErrNotStored", err)
	}
	if err := c.Replace(&ringcache.Item{Key: "p:a", Value: []byte("3")}); err != nil || getVal(t, c, "p:a") != "3" {
		t.Errorf("Replace present: %v", err)
	}
	if c.Append(&ringcache.Item{Key: "p:a", Value: []byte("z")}) != nil ||
		c.Prepend(&ringcache.Item{Key: "p:a", Value: []byte("y")}) != nil || getVal(t, c, "p:a") != "y3z" {
		t.Errorf("Append, Prepend: %q", getVal(t, c, "p:a"))
	}
	if c.Append(&ringcache.Item{Key: "p:none", Value: []byte("z")}) != ringcache.ErrNotStored ||
		c.Prepend(&ringcache.Item{Key: "p:none", Value: []byte("z")}) != ringcache.ErrNotStored {
		t.Errorf("Append/Prepend on a miss: want ErrNotStored")
	}
	// CAS: the unique from Get, a conflict, a missing key.
	it, _ = c.Get("p:a")
	old := *it
	it.Value = []byte("new")
	if err := c.CompareAndSwap(it); err != nil {
		t.Errorf("CompareAndSwap with the current unique: %v", err)
	}
	old.Value = []byte("again")
	if err := c.CompareAndSwap(&old); err != ringcache.ErrCASConflict || getVal(t, c, "p:a") != "new" {
		t.Errorf("CompareAndSwap conflict: %v, want ErrCASConflict, value kept", err)
	}
	if err := c.CompareAndSwap(&ringcache.Item{Key: "p:none", Value: []byte("x"), CasID: old.CasID}); err != ringcache.ErrCacheMiss {
		t.Errorf("CompareAndSwap on a missing key: %v, want ErrCacheMiss", err)
	}
	// Increment, Decrement.
	mustSet(t, c, &ringcache.Item{Key: "p:n", Value: []byte("10")})
	if n, err := c.Increment("p:n", 5); n != 15 || err != nil {
		t.Errorf("Increment: %d %v", n, err)
	}
	if n, err := c.Decrement("p:n", 20); n != 0 || err != nil {
		t.Errorf("Decrement below 0: %d %v, want 0", n, err)
	}
	mustSet(t, c, &ringcache.Item{Key: "p:n", Value: []byte("18446744073709551615")})
	if n, err := c.Increment("p:n", 2); n != 1 || err != nil {
		t.Errorf("Increment wraps at 2^64: %d %v, want 1", n, err)
	}
	if _, err := c.Increment("p:none", 1); err != ringcache.ErrCacheMiss {
		t.Errorf("Increment miss: %v", err)
	}
	if _, err := c.Decrement("p:none", 1); err != ringcache.ErrCacheMiss {
		t.Errorf("Decrement miss: %v", err)
	}
	mustSet(t, c, &ringcache.Item{Key: "p:s", Value: []byte("abc")})
	if _, err := c.Increment("p:s", 1); err == nil || !strings.Contains(err.Error(), "client error") {
		t.Errorf("Increment of a non-number: %v, want a client error", err)
	}
	// Touch, Delete, Expiration.
	if c.Touch("p:a", 100) != nil || c.Touch("p:none", 1) != ringcache.ErrCacheMiss {
		t.Errorf("Touch hit / miss")
	}
	if c.Delete("p:b") != nil || c.Delete("p:b") != ringcache.ErrCacheMiss {
		t.Errorf("Delete hit / miss")
	}
	mustSet(t, c, &ringcache.Item{Key: "p:e", Value: []byte("v"), Expiration: 1})
	if !waitFor(5*time.Second, func() bool { _, err := c.Get("p:e"); return err == ringcache.ErrCacheMiss }) {
		t.Errorf("Expiration 1: still there after 5 s")
	}
	if c.Touch("p:a", 1) != nil || !waitFor(5*time.Second, func() bool { _, err := c.Get("p:a"); return err == ringcache.ErrCacheMiss }) {
		t.Errorf("Touch 1: still there after 5 s")
	}
	// An empty value is a value.
	mustSet(t, c, &ringcache.Item{Key: "p:empty", Value: nil})
	if it, err := c.Get("p:empty"); err != nil || len(it.Value) != 0 {
		t.Errorf("empty value: %v %v", it, err)
	}
}

func TestGetMulti(t *testing.T) {
	c := client(t)
	defer c.Close()
	want := map[string]string{}
	var keys []string
	for i := 0; i < 250; i++ {
		k := fmt.Sprintf("m:%d", i)
		want[k] = fmt.Sprintf("v%d", i)
		keys = append(keys, k)
		mustSet(t, c, &ringcache.Item{Key: k, Value: []byte(want[k]), Flags: uint32(i)})
	}
	m, err := c.GetMulti(append(keys, "m:none", "m:1"))
	if err != nil || len(m) != 250 {
		t.Fatalf("GetMulti 250 keys over 3 nodes, misses left out: %d items, %v", len(m), err)
	}
	for i, k := range keys {
		it := m[k]
		if it == nil || string(it.Value) != want[k] || it.Flags != uint32(i) || it.Key != k || it.CasID == 0 {
			t.Fatalf("GetMulti[%q] = %+v", k, it)
		}
	}
	// The items' values are separate slices: appending to one leaves the
	// others alone; a CasID from GetMulti works for CompareAndSwap.
	m["m:1"].Value = append(m["m:1"].Value, 'X')
	if string(m["m:2"].Value) != "v2" {
		t.Errorf("append to one GetMulti value changed another: %q", m["m:2"].Value)
	}
	m["m:3"].Value = []byte("cas")
	if err := c.CompareAndSwap(m["m:3"]); err != nil || getVal(t, c, "m:3") != "cas" {
		t.Errorf("CompareAndSwap with GetMulti's CasID: %v", err)
	}
	if m, err := c.GetMulti(nil); err != nil || m == nil || len(m) != 0 {
		t.Errorf("GetMulti(nil): %v %v", m, err)
	}
	if _, err := c.GetMulti([]string{"ok", "bad key"}); err != ringcache.ErrMalformedKey {
		t.Errorf("GetMulti with a bad key: %v, want ErrMalformedKey", err)
	}
}

func TestValuesAndKeys(t *testing.T) {
	c := client(t)
	defer c.Close()
	for _, n := range []int{1, 1000, 100 * 1024, 1024*1024 - 1024} {
		big := make([]byte, n)
		rand.Read(big)
		k := fmt.Sprintf("big:%d", n)
		mustSet(t, c, &ringcache.Item{Key: k, Value: big})
		it, err := c.Get(k)
		if err != nil || !bytes.Equal(it.Value, big) {
			t.Errorf("a %d-byte value round trip: %v", n, err)
		}
		m, err := c.GetMulti([]string{k, "big:none"})
		if err != nil || !bytes.Equal(m[k].Value, big) {
			t.Errorf("a %d-byte value through GetMulti: %v", n, err)
		}
	}
	err := c.Set(&ringcache.Item{Key: "big:huge", Value: make([]byte, 2*1024*1024)})
	if !errors.Is(err, ringcache.ErrServerError) {
		t.Errorf("a 2 MiB value: %v, want errors.Is ErrServerError", err)
	}
	// Keys with bytes above 0x7e: allowed by the protocol and by gomemcache.
	var bkeys []string
	for i := 0; i < 20; i++ {
		k := string([]byte{byte(0x80 + i), 0xff, 'A', byte(0x21 + i), 0xc3, 0xa9})
		bkeys = append(bkeys, k)
		mustSet(t, c, &ringcache.Item{Key: k, Value: []byte("bin" + k)})
	}
	m, err := c.GetMulti(bkeys)
	if err != nil || len(m) != len(bkeys) {
		t.Errorf("binary keys through GetMulti: %d %v", len(m), err)
	}
	for _, k := range bkeys {
		if getVal(t, c, k) != "bin"+k || string(m[k].Value) != "bin"+k {
			t.Errorf("binary key %q", k)
		}
	}
	long := strings.Repeat("k", 250)
	mustSet(t, c, &ringcache.Item{Key: long, Value: []byte("L")})
	if getVal(t, c, long) != "L" {
		t.Errorf("a 250-byte key")
	}
	for _, bad := range []string{"", "key with space", "\r\nflush_all", strings.Repeat("k", 251), "del\x7f", "tab\t", "nul\x00"} {
		if err := c.Set(&ringcache.Item{Key: bad, Value: []byte("v")}); err != ringcache.ErrMalformedKey {
			t.Errorf("Set(%q): %v, want ErrMalformedKey", bad, err)
		}
		if _, err := c.Get(bad); err != ringcache.ErrMalformedKey {
			t.Errorf("Get(%q): %v, want ErrMalformedKey", bad, err)
		}
	}
}

func TestNodeCalls(t *testing.T) {
	c := client(t)
	defer c.Close()
	if err := c.Ping(); err != nil {
		t.Errorf("Ping: %v", err)
	}
	st, err := c.Stats()
	if err != nil || len(st) != 3 {
		t.Errorf("Stats: %d nodes, %v", len(st), err)
	}
	for addr, m := range st {
		if m["pid"] == "" {
			t.Errorf("Stats of %s: no pid", addr)
		}
	}
	for i := 0; i < 30; i++ {
		mustSet(t, c, &ringcache.Item{Key: fmt.Sprintf("fl:%d", i), Value: []byte("v")})
	}
	if err := c.FlushAll(); err != nil {
		t.Fatalf("FlushAll: %v", err)
	}
	for i := 0; i < 30; i++ {
		if _, err := c.Get(fmt.Sprintf("fl:%d", i)); err != ringcache.ErrCacheMiss {
			t.Fatalf("after FlushAll fl:%d: %v", i, err)
		}
	}
	mustSet(t, c, &ringcache.Item{Key: "fl:x", Value: []byte("v")})
	if err := c.DeleteAll(); err != nil {
		t.Errorf("DeleteAll: %v", err)
	}
	if _, err := c.Get("fl:x"); err != ringcache.ErrCacheMiss {
		t.Errorf("after DeleteAll: %v", err)
	}
	// Close: the next call opens the handle again.
	mustSet(t, c, &ringcache.Item{Key: "cl:a", Value: []byte("v")})
	c.Close()
	if getVal(t, c, "cl:a") != "v" {
		t.Errorf("after Close")
	}
}

func TestConcurrent(t *testing.T) {
	c := client(t)
	defer c.Close()
	var wg sync.WaitGroup
	var bad int64
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				k := fmt.Sprintf("cc:%d:%d", g, i)
				v := []byte(fmt.Sprintf("%d-%d", g, i))
				if c.Set(&ringcache.Item{Key: k, Value: v}) != nil {
					atomic.AddInt64(&bad, 1)
					continue
				}
				if it, err := c.Get(k); err != nil || !bytes.Equal(it.Value, v) {
					atomic.AddInt64(&bad, 1)
				}
				if i%10 == 9 {
					var ks []string
					for j := i - 9; j <= i; j++ {
						ks = append(ks, fmt.Sprintf("cc:%d:%d", g, j))
					}
					if m, err := c.GetMulti(ks); err != nil || len(m) != 10 {
						atomic.AddInt64(&bad, 1)
					}
				}
				if g == 0 && i == 50 {
					c.Close() // closing under load: calls keep working
				}
			}
		}(g)
	}
	wg.Wait()
	if bad != 0 {
		t.Errorf("32 goroutines sharing one client: %d failed calls", bad)
	}
}

func TestGetOrCompute(t *testing.T) {
	c := client(t)
	defer c.Close()
	var calls int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	got := make([]string, 16)
	errs := make([]error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			<-start
			it, err := c.GetOrCompute("goc:herd", 100, func(key string) ([]byte, uint32, error) {
				atomic.AddInt64(&calls, 1)
				time.Sleep(300 * time.Millisecond)
				return []byte("computed:" + key), 7, nil
			})
			errs[g] = err
			if err == nil {
				got[g] = fmt.Sprintf("%s/%d", it.Value, it.Flags)
			}
		}(g)
	}
	close(start)
	wg.Wait()
	if calls != 1 {
		t.Errorf("16 goroutines: compute ran %d times, want 1", calls)
	}
	for g := range got {
		if errs[g] != nil || got[g] != "computed:goc:herd/7" {
			t.Errorf("caller %d: %q %v", g, got[g], errs[g])
		}
	}
	if getVal(t, c, "goc:herd") != "computed:goc:herd" {
		t.Errorf("the computed value is stored")
	}
	boom := errors.New("no source")
	if _, err := c.GetOrCompute("goc:boom", 10, func(string) ([]byte, uint32, error) { return nil, 0, boom }); err != boom {
		t.Errorf("compute's error: %v, want it returned", err)
	}
	it, err := c.GetOrCompute("goc:boom", 10, func(string) ([]byte, uint32, error) { return []byte("second"), 0, nil })
	if err != nil || string(it.Value) != "second" {
		t.Errorf("after a failed compute the next caller wins: %v %v", it, err)
	}
	func() {
		defer func() {
			if recover() != "kaboom" {
				t.Errorf("a panic in compute is not re-raised")
			}
		}()
		c.GetOrCompute("goc:panic", 10, func(string) ([]byte, uint32, error) { panic("kaboom") })
	}()
	it, err = c.GetOrComputeWith("goc:bin key\x00", ringcache.ComputeOptions{TTL: 10, Wait: time.Second},
		func(k string) ([]byte, uint32, error) { return []byte(k), 0, nil })
	if err != nil || string(it.Value) != "goc:bin key\x00" {
		t.Errorf("GetOrComputeWith a binary key: %v %v", it, err)
	}
}

// ringctlLocate runs `ringctl locate` on a membership file for keys.
func ringctlLocate(t *testing.T, members string, keys []string) map[string]string {
	cmd := exec.Command(env(t, "RC_GO_RINGCTL"), "locate", "--members", members)
	cmd.Stdin = strings.NewReader(strings.Join(keys, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ringctl locate: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, owners, _ := strings.Cut(line, "\t")
		m[k] = owners
	}
	return m
}

func TestLocate(t *testing.T) {
	c := client(t)
	defer c.Close()
	var keys []string
	for i := 0; i < 300; i++ {
		keys = append(keys, fmt.Sprintf("loc:%d", i))
	}
	keys = append(keys, "foo", "bar")
	want := ringctlLocate(t, env(t, "RC_GO_MEMBERS"), keys)
	for _, k := range keys {
		got, err := c.Locate(k)
		if err != nil || strings.Join(got, ",") != want[k] {
			t.Errorf("Locate(%q) = %v %v, ringctl says %s", k, got, err, want[k])
		}
	}
	addrs, err := c.LocateAddrs("foo")
	if err != nil || len(addrs) != 2 || !strings.HasPrefix(addrs[0], "127.0.0.1:") {
		t.Errorf("LocateAddrs: %v %v", addrs, err)
	}
}

func TestGoldenVectors(t *testing.T) {
	dir := env(t, "RC_GO_VECTORS")
	data, err := os.ReadFile(filepath.Join(dir, "locate.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]*ringcache.Client{}
	n, cut := 0, 0
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, "\t")
		m, key, pref := f[0], f[2], strings.Split(f[3], ",")
		var r int
		fmt.Sscan(f[1], &r)
		// A membership says R = 1..8: a larger R is compared on its first 8.
		rr := r
		if rr > 8 {
			rr = 8
			cut++
		}
		id := fmt.Sprintf("%s/%d", m, rr)
		cl := clients[id]
		if cl == nil {
			text, err := os.ReadFile(filepath.Join(dir, m+".members"))
			if err != nil {
				t.Fatal(err)
			}
			lines := []string{fmt.Sprintf("replicas %d", rr)}
			for _, l := range strings.Split(string(text), "\n") {
				if !strings.HasPrefix(l, "replicas") {
					lines = append(lines, l)
				}
			}
			cl, err = ringcache.NewFromMembersText(strings.Join(lines, "\n")+"\n", id, nil)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			clients[id] = cl
		}
		n++
		got, err := cl.Locate(key)
		if len(pref) > rr {
			pref = pref[:rr]
		}
		if err != nil || strings.Join(got, ",") != strings.Join(pref, ",") {
			t.Errorf("vector %s R=%d %q: Locate = %v %v, want %v", m, r, key, got, err, pref)
		}
	}
	for _, cl := range clients {
		cl.Close()
	}
	if n < 3000 {
		t.Errorf("only %d vectors read", n)
	}
	t.Logf("Locate matches the %d golden vectors of locate.tsv (%d with R > 8 on their first 8 owners)", n, cut)
}

// TestStore: NewFromStore reads the active membership of the etcd store
// in RC_GO_STORE (test_client_store.py starts etcd and the cluster), and
// an etcd prefix with no membership (RC_GO_STORE_EMPTY) is CodeMembers.
func TestStore(t *testing.T) {
	c, err := ringcache.NewFromStore(env(t, "RC_GO_STORE"), &ringcache.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("NewFromStore(etcd): %v", err)
	}
	defer c.Close()
	if err := c.Set(&ringcache.Item{Key: "gostore:a", Value: []byte("go")}); err != nil {
		t.Fatalf("Set through the etcd store's membership: %v", err)
	}
	if v := getVal(t, c, "gostore:a"); v != "go" {
		t.Errorf("Get: %q, want \"go\"", v)
	}
	owners, err := c.Locate("foo")
	if want := env(t, "RC_GO_STORE_FOO"); err != nil || strings.Join(owners, ",") != want {
		t.Errorf("Locate(foo) = %v, %v; want %s (ringctl locate)", owners, err, want)
	}
	_, err = ringcache.NewFromStore(env(t, "RC_GO_STORE_EMPTY"), nil)
	if e, ok := err.(*ringcache.Error); !ok || e.Code != ringcache.CodeMembers ||
		!strings.Contains(e.Msg, "no active membership") {
		t.Errorf("NewFromStore(empty prefix): %v, want CodeMembers \"no active membership\"", err)
	}
}
