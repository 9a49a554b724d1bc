// Beyond gomemcache's keyed calls: herd-safe GetOrCompute, placement
// (Locate, Nodes), the per-node calls (Ping, Stats, FlushAll, DeleteAll).
package ringcache

/*
#include <stdlib.h>
#include <ringcache.h>
#include "rcgo.h"
*/
import "C"

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"runtime/cgo"
	"strings"
	"time"
	"unsafe"
)

// ComputeFunc computes the value of a missing or stale key for
// GetOrCompute: the value (at least one byte) and its flags, or an error
// that GetOrCompute returns.
type ComputeFunc func(key string) (value []byte, flags uint32, err error)

// ComputeOptions tune GetOrComputeWith.
type ComputeOptions struct {
	// TTL of the stored value (0: never expires).
	TTL int32
	// VivifyTTL: the winner's placeholder lives this long (default 30 s).
	VivifyTTL int32
	// RecacheBelow: a hit with fewer seconds left is recomputed once, by
	// one caller, while the others get the old value (0: off).
	RecacheBelow int32
	// Wait: how long a caller that did not win waits for the winner's
	// value (default 2 s; then an *Error with CodeTimedOut).
	Wait time.Duration
}

type computeState struct {
	fn    ComputeFunc
	err   error
	panic interface{}
}

// GetOrCompute returns the value of key; when it is missing or stale,
// exactly one caller in the cluster (any process, any goroutine) runs
// compute and stores its value with ttl, and the others wait for that
// value. An error from compute is returned to its caller, and the next
// caller computes.
func (c *Client) GetOrCompute(key string, ttl int32, compute ComputeFunc) (*Item, error) {
	return c.GetOrComputeWith(key, ComputeOptions{TTL: ttl}, compute)
}

// GetOrComputeWith is GetOrCompute with all its options. The key may be
// any 1..250 bytes (with spaces or control bytes: up to 186, sent
// base64-encoded). compute runs on the calling goroutine.
func (c *Client) GetOrComputeWith(key string, o ComputeOptions, compute ComputeFunc) (*Item, error) {
	var mo C.struct_ringcache_meta_opts
	C.ringcache_meta_opts_init(&mo)
	mo.ttl = C.int32_t(o.TTL)
	if o.VivifyTTL > 0 {
		mo.vivify_ttl = C.int32_t(o.VivifyTTL)
	}
	if o.RecacheBelow > 0 {
		mo.recache_below = C.int32_t(o.RecacheBelow)
	}
	if o.Wait > 0 {
		mo.wait_ms = ms(o.Wait)
	}
	st := &computeState{fn: compute}
	hd := cgo.NewHandle(st)
	defer hd.Delete()
	h, err := c.acquire()
	if err != nil {
		return nil, err
	}
	var r C.struct_ringcache_meta_result
	code := C.rcgo_get_or_compute(h.rc, kptr(key), C.size_t(len(key)), &mo, C.uintptr_t(hd), &r)
	c.release(h)
	defer C.ringcache_meta_result_clear(&r)
	if st.panic != nil {
		panic(st.panic)
	}
	if st.err != nil {
		return nil, st.err
	}
	if code != 0 {
		return nil, codeErr("get_or_compute", code)
	}
	return &Item{Key: key, Value: C.GoBytes(unsafe.Pointer(r.value), C.int(r.value_len)),
		Flags: uint32(r.flags), CasID: uint64(r.cas)}, nil
}

//export rcgoCompute
func rcgoCompute(hd C.uintptr_t, key *C.char, keyLen C.size_t, out *C.struct_ringcache_value) (code C.int) {
	st := cgo.Handle(hd).Value().(*computeState)
	defer func() {
		// A panic must not unwind through libringcache's frames: it is
		// re-raised once the C call has returned.
		if p := recover(); p != nil {
			st.panic = p
			code = C.RINGCACHE_EINVAL
		}
	}()
	v, flags, err := st.fn(C.GoStringN(key, C.int(keyLen)))
	if err != nil {
		st.err = err
		return C.RINGCACHE_EINVAL
	}
	p := C.malloc(C.size_t(len(v)) + 1)
	if p == nil {
		return C.RINGCACHE_ENOMEM
	}
	copy(unsafe.Slice((*byte)(p), len(v)+1), v)
	*(*byte)(unsafe.Add(p, len(v))) = 0
	out.data = (*C.char)(p)
	out.len = C.size_t(len(v))
	out.flags = C.uint32_t(flags)
	return 0
}

// Node is one node of the membership the client routes with.
type Node struct {
	ID        string
	Addr      string // "host:port"
	Down      bool   // marked down now (a hint)
	LastError int    // why it was last marked down (Code*), 0: never
}

// Nodes lists the membership the client routes with, in its order.
func (c *Client) Nodes() ([]Node, error) {
	h, err := c.acquire()
	if err != nil {
		return nil, err
	}
	defer c.release(h)
	n := int(C.ringcache_node_count(h.rc))
	out := make([]Node, 0, n)
	for i := 0; i < n; i++ {
		id := C.ringcache_node_id(h.rc, C.size_t(i))
		addr := C.ringcache_node_addr(h.rc, C.size_t(i))
		if id == nil || addr == nil {
			break // the membership changed under us
		}
		out = append(out, Node{ID: C.GoString(id), Addr: C.GoString(addr),
			Down:      C.ringcache_node_is_down(h.rc, C.size_t(i)) != 0,
			LastError: int(C.ringcache_node_error(h.rc, C.size_t(i)))})
	}
	return out, nil
}

func (c *Client) locate(key string, addrs bool) ([]string, error) {
	h, err := c.acquire()
	if err != nil {
		return nil, err
	}
	defer c.release(h)
	var idx [16]C.size_t
	n := C.ringcache_locate(h.rc, kptr(key), C.size_t(len(key)), &idx[0], C.size_t(len(idx)))
	if n < 0 {
		return nil, codeErr("locate", n)
	}
	out := make([]string, 0, int(n))
	for i := 0; i < int(n); i++ {
		var s *C.char
		if addrs {
			s = C.ringcache_node_addr(h.rc, idx[i])
		} else {
			s = C.ringcache_node_id(h.rc, idx[i])
		}
		out = append(out, C.GoString(s))
	}
	return out, nil
}

// Locate returns the key's preference list, node ids primary first: the
// same as `ringctl locate` prints. Any 1..250 bytes are a key here.
func (c *Client) Locate(key string) ([]string, error) { return c.locate(key, false) }

// LocateAddrs is Locate with the nodes' addresses.
func (c *Client) LocateAddrs(key string) ([]string, error) { return c.locate(key, true) }

// Stats returns every node's `stats`: node address -> name -> value.
// ErrNoStats when no node answered; the error of a node that failed is
// returned with the others' statistics.
func (c *Client) Stats() (map[string]map[string]string, error) {
	nodes, err := c.Nodes()
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]string, len(nodes))
	var last error
	for i, n := range nodes {
		m := map[string]string{}
		if err := c.nodeStats(i, m); err != nil {
			last = err
			continue
		}
		out[n.Addr] = m
	}
	if len(out) == 0 {
		if last != nil {
			return nil, last
		}
		return nil, ErrNoStats
	}
	return out, last
}

// nodeStats reads node i's stats into m (nil: only asks).
func (c *Client) nodeStats(i int, m map[string]string) error {
	h, err := c.acquire()
	if err != nil {
		return err
	}
	defer c.release(h)
	var hv C.uintptr_t
	if m != nil {
		hd := cgo.NewHandle(m)
		defer hd.Delete()
		hv = C.uintptr_t(hd)
	}
	return codeErr("stats", C.rcgo_stats(h.rc, C.size_t(i), nil, hv))
}

//export rcgoStat
func rcgoStat(hd C.uintptr_t, name, value *C.char) {
	cgo.Handle(hd).Value().(map[string]string)[C.GoString(name)] = C.GoString(value)
}

// Ping checks that every node answers (its `stats`); the first failure is
// returned.
func (c *Client) Ping() error {
	nodes, err := c.Nodes()
	if err != nil {
		return err
	}
	for i, n := range nodes {
		if err := c.nodeStats(i, nil); err != nil {
			return fmt.Errorf("ringcache: ping %s (%s): %w", n.ID, n.Addr, err)
		}
	}
	return nil
}

// FlushAll empties every node (memcached's flush_all), over a connection
// of its own to each node with the client's TLS and login: libringcache
// has no flush call.
func (c *Client) FlushAll() error {
	nodes, err := c.Nodes()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		reply, err := c.nodeCommand(n.Addr, "flush_all\r\n")
		if err != nil {
			return err
		}
		if reply != "OK" {
			return &Error{Code: CodeServer, Op: "flush_all", Msg: n.Addr + ": " + reply}
		}
	}
	return nil
}

// DeleteAll deletes all items in the cache: FlushAll.
func (c *Client) DeleteAll() error { return c.FlushAll() }

// nodeCommand sends one command line to the node at addr over a new
// connection and returns the reply line.
func (c *Client) nodeCommand(addr, line string) (string, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", &Error{Code: CodeIO, Op: "flush_all", Msg: err.Error()}
	}
	defer conn.Close()
	if c.opts.TLS {
		cfg, err := c.tlsConfig(addr)
		if err != nil {
			return "", err
		}
		tc := tls.Client(conn, cfg)
		conn = tc
	}
	conn.SetDeadline(time.Now().Add(timeout + time.Second))
	r := bufio.NewReader(conn)
	readLine := func() (string, error) {
		s, err := r.ReadString('\n')
		if err != nil {
			return "", &Error{Code: CodeIO, Op: "flush_all", Msg: addr + ": " + err.Error()}
		}
		return strings.TrimRight(s, "\r\n"), nil
	}
	if c.opts.Username != "" {
		cred := c.opts.Username + " " + c.opts.Password
		fmt.Fprintf(conn, "set _ 0 0 %d\r\n%s\r\n", len(cred), cred)
		if s, err := readLine(); err != nil || s != "STORED" {
			if err != nil {
				return "", err
			}
			return "", &Error{Code: CodeAuth, Op: "flush_all", Msg: addr + ": " + s}
		}
	}
	if _, err := conn.Write([]byte(line)); err != nil {
		return "", &Error{Code: CodeIO, Op: "flush_all", Msg: addr + ": " + err.Error()}
	}
	return readLine()
}

// tlsConfig is the client's TLS settings for crypto/tls (FlushAll).
func (c *Client) tlsConfig(addr string) (*tls.Config, error) {
	host, _, _ := net.SplitHostPort(addr)
	cfg := &tls.Config{ServerName: host}
	if c.opts.TLSCAFile != "" {
		pem, err := os.ReadFile(c.opts.TLSCAFile)
		if err != nil {
			return nil, &Error{Code: CodeTLS, Op: "flush_all", Msg: err.Error()}
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	if c.opts.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.opts.TLSCertFile, c.opts.TLSKeyFile)
		if err != nil {
			return nil, &Error{Code: CodeTLS, Op: "flush_all", Msg: err.Error()}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if c.opts.TLSSkipNameCheck {
		// As libringcache: the chain is verified, the name is not.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return &Error{Code: CodeTLS, Op: "flush_all", Msg: addr + ": no certificate"}
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots,
				Intermediates: inter})
			return err
		}
	}
	return cfg, nil
}
