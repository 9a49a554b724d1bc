// The keyed calls of gomemcache's API (Get, Set, ..., GetMulti) over
// libringcache. Keys are passed to C without a copy; GetMulti is one cgo
// call (rcgo_mget: libringcache's pipelined multi-get per owner).
package ringcache

/*
#include <stdlib.h>
#include <ringcache.h>
#include "rcgo.h"
*/
import "C"

import (
	"unsafe"
)

// Item is an item to be got or stored in the cache.
type Item struct {
	// Key is the Item's key (250 bytes maximum).
	Key string

	// Value is the Item's value.
	Value []byte

	// Flags are server-opaque flags whose semantics are entirely up to
	// the app.
	Flags uint32

	// Expiration is the cache expiration time, in seconds: either a
	// relative time from now (up to 1 month), or an absolute Unix epoch
	// time. Zero means the Item has no expiration time.
	Expiration int32

	// CasID is the compare-and-swap unique of the item as read by Get or
	// GetMulti, for CompareAndSwap.
	CasID uint64
}

// kptr is a C view of the bytes of s (no copy; C does not keep it).
func kptr(s string) *C.char {
	if len(s) == 0 {
		return nil
	}
	return (*C.char)(*(*unsafe.Pointer)(unsafe.Pointer(&s)))
}

// vptr is a C view of the bytes of b (no copy; C does not keep it).
func vptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// Get gets the item for the given key (with its CasID). ErrCacheMiss is
// returned for a cache miss (or when every owner of the key is down).
func (c *Client) Get(key string) (*Item, error) {
	if !legalKey(key) {
		return nil, ErrMalformedKey
	}
	h, err := c.acquire()
	if err != nil {
		return nil, err
	}
	var v C.struct_ringcache_value
	code := C.ringcache_gets(h.rc, kptr(key), C.size_t(len(key)), &v)
	c.release(h)
	if code != 0 {
		return nil, codeErr("get", code)
	}
	it := &Item{Key: key, Value: C.GoBytes(unsafe.Pointer(v.data), C.int(v.len)),
		Flags: uint32(v.flags), CasID: uint64(v.cas)}
	C.ringcache_value_clear(&v)
	return it, nil
}

const (
	opSet = iota
	opAdd
	opReplace
	opAppend
	opPrepend
	opCAS
)

var opNames = [...]string{"set", "add", "replace", "append", "prepend", "cas"}

func (c *Client) store(op int, it *Item) error {
	if !legalKey(it.Key) {
		return ErrMalformedKey
	}
	h, err := c.acquire()
	if err != nil {
		return err
	}
	k, kl := kptr(it.Key), C.size_t(len(it.Key))
	v, vl := vptr(it.Value), C.size_t(len(it.Value))
	fl, ttl := C.uint32_t(it.Flags), C.int32_t(it.Expiration)
	var code C.int
	switch op {
	case opSet:
		code = C.ringcache_set(h.rc, k, kl, v, vl, fl, ttl)
	case opAdd:
		code = C.ringcache_add(h.rc, k, kl, v, vl, fl, ttl)
	case opReplace:
		code = C.ringcache_replace(h.rc, k, kl, v, vl, fl, ttl)
	case opAppend:
		code = C.ringcache_append(h.rc, k, kl, v, vl)
	case opPrepend:
		code = C.ringcache_prepend(h.rc, k, kl, v, vl)
	case opCAS:
		code = C.ringcache_cas(h.rc, k, kl, v, vl, fl, ttl, C.uint64_t(it.CasID))
	}
	c.release(h)
	return codeErr(opNames[op], code)
}

// Set writes the given item, unconditionally.
func (c *Client) Set(item *Item) error { return c.store(opSet, item) }

// Add writes the given item, if no value already exists for its key.
// ErrNotStored is returned if that condition is not met.
func (c *Client) Add(item *Item) error { return c.store(opAdd, item) }

// Replace writes the given item, but only if the server *does* already
// hold data for this key. ErrNotStored is returned otherwise.
func (c *Client) Replace(item *Item) error { return c.store(opReplace, item) }

// Append appends the given item's value to the present value of its key
// (Flags and Expiration are ignored). ErrNotStored is returned when the
// key is absent.
func (c *Client) Append(item *Item) error { return c.store(opAppend, item) }

// Prepend prepends the given item's value to the present value of its key
// (Flags and Expiration are ignored). ErrNotStored is returned when the
// key is absent.
func (c *Client) Prepend(item *Item) error { return c.store(opPrepend, item) }

// CompareAndSwap writes the given item that was previously returned by
// Get, if the value was neither modified nor evicted between the Get and
// the CompareAndSwap calls. ErrCASConflict is returned if the value was
// modified in between; ErrCacheMiss if it is gone.
func (c *Client) CompareAndSwap(item *Item) error { return c.store(opCAS, item) }

// Delete deletes the item with the provided key. ErrCacheMiss is returned
// if the item didn't already exist in the cache.
func (c *Client) Delete(key string) error {
	if !legalKey(key) {
		return ErrMalformedKey
	}
	h, err := c.acquire()
	if err != nil {
		return err
	}
	code := C.ringcache_delete(h.rc, kptr(key), C.size_t(len(key)))
	c.release(h)
	return codeErr("delete", code)
}

// Touch updates the expiry for the given key: seconds is either a Unix
// timestamp or, if less than 1 month, the number of seconds into the
// future. ErrCacheMiss is returned if the key is not in the cache.
func (c *Client) Touch(key string, seconds int32) error {
	if !legalKey(key) {
		return ErrMalformedKey
	}
	h, err := c.acquire()
	if err != nil {
		return err
	}
	code := C.ringcache_touch(h.rc, kptr(key), C.size_t(len(key)), C.int32_t(seconds))
	c.release(h)
	return codeErr("touch", code)
}

// Increment atomically increments key by delta and returns the new value
// (wrapping at 2^64). ErrCacheMiss is returned if the key is absent; a
// value that is not a decimal number is a client error.
func (c *Client) Increment(key string, delta uint64) (uint64, error) {
	return c.incrDecr(true, key, delta)
}

// Decrement atomically decrements key by delta and returns the new value
// (capped at zero). Errors as Increment.
func (c *Client) Decrement(key string, delta uint64) (uint64, error) {
	return c.incrDecr(false, key, delta)
}

func (c *Client) incrDecr(incr bool, key string, delta uint64) (uint64, error) {
	if !legalKey(key) {
		return 0, ErrMalformedKey
	}
	h, err := c.acquire()
	if err != nil {
		return 0, err
	}
	var out C.uint64_t
	var code C.int
	if incr {
		code = C.ringcache_incr(h.rc, kptr(key), C.size_t(len(key)), C.uint64_t(delta), &out)
	} else {
		code = C.ringcache_decr(h.rc, kptr(key), C.size_t(len(key)), C.uint64_t(delta), &out)
	}
	c.release(h)
	if incr {
		return uint64(out), codeErr("incr", code)
	}
	return uint64(out), codeErr("decr", code)
}

// GetMulti is a batch version of Get. The returned map from keys to items
// may have fewer elements than the input slice, due to cache misses. The
// keys are grouped by owner and each node gets one pipelined request, all
// nodes in parallel (keys of a failed node are read from their next
// owner). If no error is returned, the returned map is non-nil; with an
// error for some keys (a node that refused the login), the map holds the
// others.
func (c *Client) GetMulti(keys []string) (map[string]*Item, error) {
	total := 0
	for _, k := range keys {
		if !legalKey(k) {
			return nil, ErrMalformedKey
		}
		total += len(k)
	}
	n := len(keys)
	m := make(map[string]*Item, n)
	if n == 0 {
		return m, nil
	}
	kbuf := make([]byte, 0, total)
	sizes := make([]C.size_t, 3*n) // key lengths, value offsets, value lengths
	for i, k := range keys {
		kbuf = append(kbuf, k...)
		sizes[i] = C.size_t(len(k))
	}
	status := make([]C.int, n)
	flags := make([]C.uint32_t, n)
	cas := make([]C.uint64_t, n)
	h, err := c.acquire()
	if err != nil {
		return nil, err
	}
	var vbuf *C.char
	var vlen C.size_t
	code := C.rcgo_mget(h.rc, (*C.char)(unsafe.Pointer(&kbuf[0])), &sizes[0], C.size_t(n), 1,
		&status[0], &sizes[n], &sizes[2*n], &flags[0], &cas[0], &vbuf, &vlen)
	c.release(h)
	if code != 0 {
		return nil, codeErr("get_multi", code)
	}
	var all []byte
	if vbuf != nil {
		all = C.GoBytes(unsafe.Pointer(vbuf), C.int(vlen))
		C.free(unsafe.Pointer(vbuf))
	}
	hits := 0
	for i := range keys {
		if status[i] == 0 {
			hits++
		}
	}
	items := make([]Item, hits) // one allocation for every hit's Item
	var kerr error
	for i, k := range keys {
		switch int(status[i]) {
		case 0:
			off, l := int(sizes[n+i]), int(sizes[2*n+i])
			it := &items[len(items)-hits]
			hits--
			*it = Item{Key: k, Value: all[off : off+l : off+l], Flags: uint32(flags[i]),
				CasID: uint64(cas[i])}
			m[k] = it
		case CodeNotFound:
		default:
			kerr = &Error{Code: int(status[i]), Op: "get_multi", Msg: "key " + k + ": " +
				C.GoString(C.ringcache_strerror(status[i]))}
		}
	}
	return m, kerr
}
