// Package ringcache is the Go client of a ringcache cluster: libringcache
// (client/ringcache.h) through cgo, with gomemcache's API
// (github.com/bradfitz/gomemcache/memcache). Every key goes straight to its
// owner by the ring code the nodes run, with libringcache's fail-over,
// epoch learning and one pipelined request per node for GetMulti.
//
// This file: the Client, its constructors and options, the handle's life.
package ringcache

/*
#cgo LDFLAGS: -lringcache
#include <stdlib.h>
#include <ringcache.h>
*/
import "C"

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// DefaultTimeout is the timeout of one request and its reply when
// Client.Timeout is zero: libringcache's default.
const DefaultTimeout = time.Second

// DefaultMaxIdleConns is the number of idle connections kept per node when
// Client.MaxIdleConns is zero: libringcache's default.
const DefaultMaxIdleConns = 4

// Options are libringcache's tunables (struct ringcache_options). Zero
// values mean libringcache's defaults.
type Options struct {
	// ConnectTimeout bounds a TCP connect (default 200 ms; Client.Timeout
	// when that is set and this is not).
	ConnectTimeout time.Duration
	// Timeout bounds one request and its reply (a whole multi-get).
	Timeout time.Duration
	// MaxIdleConns is the number of idle connections kept per node.
	MaxIdleConns int
	// RetryInterval: a failed node is left alone this long, doubling up to
	// RetryMax (defaults 1 s and 8 s).
	RetryInterval time.Duration
	RetryMax      time.Duration
	// MaxValueBytes is the largest value sent (default 1 MiB).
	MaxValueBytes int
	// PollInterval is the epoch poll interval (default 1 s); negative
	// turns the poll off.
	PollInterval time.Duration
	// TLS to every node (nodes run with -Z). TLSCAFile: the CA bundle
	// (empty: the system's); TLSCertFile, TLSKeyFile: the client
	// certificate; TLSSkipNameCheck: do not check the node's name.
	TLS              bool
	TLSCAFile        string
	TLSCertFile      string
	TLSKeyFile       string
	TLSSkipNameCheck bool
	// Username and Password log in to nodes started with -Y.
	Username string
	Password string
}

// Client is a ringcache client. It is safe for unlocked use by multiple
// concurrent goroutines (libringcache's handle is thread-safe: a
// connection pool per node, the ring swapped atomically). Timeout and
// MaxIdleConns are read when the handle is opened: at the first call, and
// again at the first call after Close.
type Client struct {
	// Timeout bounds one request and its reply (and a connect, unless
	// Options.ConnectTimeout is set). If zero, DefaultTimeout is used.
	Timeout time.Duration

	// MaxIdleConns is the maximum number of idle connections kept per
	// node. If zero, DefaultMaxIdleConns is used.
	MaxIdleConns int

	opts  Options
	open  opener
	seeds int // -1: not a seed list

	mu  sync.Mutex // serialises opening
	cur atomic.Pointer[handle]
}

// opener creates a libringcache handle with options o, a reason in err.
type opener func(o *C.struct_ringcache_options, err *C.char, errlen C.size_t) (*C.struct_ringcache, C.int)

// handle is one libringcache handle with a reference count: the Client
// holds one reference until Close, each running call one; the last
// release frees it (ringcache_free must not race with calls).
type handle struct {
	rc   *C.struct_ringcache
	refs int64
}

// New returns a client of the given seed servers ("host:port" or
// "[v6]:port"), as gomemcache's New: ringcache nodes give the cluster's
// membership; plain memcached servers become the membership themselves.
// The seeds are asked at the first call, so errors appear there.
func New(server ...string) *Client {
	c := newClient(seedOpener(server), nil)
	c.seeds = len(server)
	return c
}

// NewFromServers is New with options; the seeds are asked now.
func NewFromServers(servers []string, opts *Options) (*Client, error) {
	c := newClient(seedOpener(servers), opts)
	c.seeds = len(servers)
	return c, c.Open()
}

// NewFromMembersFile returns a client of the membership file at path (the
// *.members format, docs/PLACEMENT.md), read now.
func NewFromMembersFile(path string, opts *Options) (*Client, error) {
	return newFromString(path, opts, func(s *C.char, o *C.struct_ringcache_options, err *C.char, errlen C.size_t) (*C.struct_ringcache, C.int) {
		var rc *C.struct_ringcache
		return rc, C.ringcache_new_members_file(&rc, s, o, err, errlen)
	})
}

// NewFromMembersText returns a client of membership text in memory; name
// is used in error messages.
func NewFromMembersText(text, name string, opts *Options) (*Client, error) {
	return newFromString(text, opts, func(s *C.char, o *C.struct_ringcache_options, err *C.char, errlen C.size_t) (*C.struct_ringcache, C.int) {
		cname := C.CString(name)
		defer C.free(unsafe.Pointer(cname))
		var rc *C.struct_ringcache
		return rc, C.ringcache_new_members_text(&rc, s, C.size_t(len(text)), cname, o, err, errlen)
	})
}

// NewFromStore returns a client of the active membership of the
// membership store ringctl --store names: "etcd://HOST:PORT[,...]/PREFIX"
// ("etcds://" for TLS, options as ringctl(1) lists them), or a directory
// ("DIR" or "dir:DIR", which must exist). The store is read now, once;
// later epochs come from the nodes.
func NewFromStore(store string, opts *Options) (*Client, error) {
	return newFromString(store, opts, func(s *C.char, o *C.struct_ringcache_options, err *C.char, errlen C.size_t) (*C.struct_ringcache, C.int) {
		var rc *C.struct_ringcache
		return rc, C.ringcache_new_store(&rc, s, o, err, errlen)
	})
}

// newFromString opens a client now whose handle is made from one string
// (a path, a text, a store) by create.
func newFromString(arg string, opts *Options, create func(*C.char, *C.struct_ringcache_options, *C.char, C.size_t) (*C.struct_ringcache, C.int)) (*Client, error) {
	open := func(o *C.struct_ringcache_options, err *C.char, errlen C.size_t) (*C.struct_ringcache, C.int) {
		carg := C.CString(arg)
		defer C.free(unsafe.Pointer(carg))
		return create(carg, o, err, errlen)
	}
	c := newClient(open, opts)
	return c, c.Open()
}

func newClient(open opener, opts *Options) *Client {
	c := &Client{open: open, seeds: -1}
	if opts != nil {
		c.opts = *opts
		c.Timeout = opts.Timeout
		c.MaxIdleConns = opts.MaxIdleConns
	}
	return c
}

func seedOpener(servers []string) opener {
	list := append([]string(nil), servers...)
	return func(o *C.struct_ringcache_options, err *C.char, errlen C.size_t) (*C.struct_ringcache, C.int) {
		if len(list) == 0 {
			return nil, C.RINGCACHE_EMEMBERS
		}
		// The array is C memory: it holds pointers, so it cannot be Go's.
		arr := unsafe.Slice((**C.char)(C.malloc(C.size_t(len(list))*C.size_t(unsafe.Sizeof((*C.char)(nil))))), len(list))
		for i, s := range list {
			arr[i] = C.CString(s)
		}
		defer func() {
			for _, p := range arr {
				C.free(unsafe.Pointer(p))
			}
			C.free(unsafe.Pointer(&arr[0]))
		}()
		var rc *C.struct_ringcache
		code := C.ringcache_new_seeds(&rc, &arr[0], C.size_t(len(list)), o, err, errlen)
		return rc, code
	}
}

func ms(d time.Duration) C.int {
	if d > 0 && d < time.Millisecond {
		return 1
	}
	return C.int(d / time.Millisecond)
}

// Open opens the libringcache handle now (calls open it when needed):
// reads the membership or asks the seeds. Returns ErrNoServers for an
// empty seed list, an *Error (CodeMembers) for a bad membership.
func (c *Client) Open() error {
	h, err := c.acquire()
	if err == nil {
		c.release(h)
	}
	return err
}

// openHandle builds the options and the handle; c.mu held.
func (c *Client) openHandle() (*handle, error) {
	if c.seeds == 0 {
		return nil, ErrNoServers
	}
	var o C.struct_ringcache_options
	C.ringcache_options_init(&o)
	op := c.Timeout
	if op == 0 {
		op = c.opts.Timeout
	}
	if op > 0 {
		o.op_timeout_ms = ms(op)
		o.connect_timeout_ms = ms(op)
	}
	if c.opts.ConnectTimeout > 0 {
		o.connect_timeout_ms = ms(c.opts.ConnectTimeout)
	}
	idle := c.MaxIdleConns
	if idle == 0 {
		idle = c.opts.MaxIdleConns
	}
	if idle > 0 {
		o.pool_size = C.uint(idle)
	}
	if c.opts.RetryInterval > 0 {
		o.retry_interval_ms = ms(c.opts.RetryInterval)
	}
	if c.opts.RetryMax > 0 {
		o.retry_max_ms = ms(c.opts.RetryMax)
	}
	if c.opts.MaxValueBytes > 0 {
		o.max_value_bytes = C.size_t(c.opts.MaxValueBytes)
	}
	var frees []unsafe.Pointer
	cstr := func(s string) *C.char {
		if s == "" {
			return nil
		}
		p := C.CString(s)
		frees = append(frees, unsafe.Pointer(p))
		return p
	}
	defer func() {
		for _, p := range frees {
			C.free(p)
		}
	}()
	if c.opts.TLS {
		o.tls = 1
		if c.opts.TLSSkipNameCheck {
			o.tls_skip_name_check = 1
		}
		o.tls_ca_file = cstr(c.opts.TLSCAFile)
		o.tls_cert_file = cstr(c.opts.TLSCertFile)
		o.tls_key_file = cstr(c.opts.TLSKeyFile)
	}
	if c.opts.Username != "" || c.opts.Password != "" {
		o.auth_user = cstr(c.opts.Username)
		o.auth_password = C.CString(c.opts.Password)
		frees = append(frees, unsafe.Pointer(o.auth_password))
	}
	errbuf := (*C.char)(C.calloc(256, 1))
	defer C.free(unsafe.Pointer(errbuf))
	rc, code := c.open(&o, errbuf, 256)
	if code != 0 {
		msg := C.GoString(errbuf)
		if msg == "" {
			msg = C.GoString(C.ringcache_strerror(code))
		}
		return nil, &Error{Code: int(code), Op: "open", Msg: msg}
	}
	if c.opts.PollInterval != 0 {
		p := c.opts.PollInterval
		if p < 0 {
			p = 0
		}
		C.ringcache_set_poll_interval(rc, ms(p))
	}
	return &handle{rc: rc, refs: 1}, nil
}

// acquire returns the current handle with a reference taken (opening it
// when there is none); release gives the reference back.
func (c *Client) acquire() (*handle, error) {
	for {
		h := c.cur.Load()
		if h == nil {
			c.mu.Lock()
			if c.cur.Load() == nil {
				nh, err := c.openHandle()
				if err != nil {
					c.mu.Unlock()
					return nil, err
				}
				c.cur.Store(nh)
			}
			c.mu.Unlock()
			continue
		}
		r := atomic.LoadInt64(&h.refs)
		if r > 0 && atomic.CompareAndSwapInt64(&h.refs, r, r+1) {
			return h, nil
		}
	}
}

func (c *Client) release(h *handle) {
	if atomic.AddInt64(&h.refs, -1) == 0 {
		C.ringcache_free(h.rc)
	}
}

// Close closes every connection and frees the handle once the calls
// running on it return. The client stays usable: the next call opens a new
// handle (and reconnects).
func (c *Client) Close() error {
	c.mu.Lock()
	h := c.cur.Swap(nil)
	c.mu.Unlock()
	if h != nil {
		c.release(h)
	}
	return nil
}

// Epoch is the membership epoch the client routes with (0: seeds used as
// the membership).
func (c *Client) Epoch() uint64 {
	h, err := c.acquire()
	if err != nil {
		return 0
	}
	defer c.release(h)
	return uint64(C.ringcache_epoch(h.rc))
}

// Refresh fetches the membership from the nodes now and adopts it when
// its epoch is higher.
func (c *Client) Refresh() error {
	h, err := c.acquire()
	if err != nil {
		return err
	}
	defer c.release(h)
	return codeErr("refresh", C.ringcache_refresh(h.rc))
}
