// Errors of the ringcache package: gomemcache's sentinels, returned as the
// same values (compare with ==), and *Error for the rest of libringcache's
// codes (RINGCACHE_E* in ringcache.h).
package ringcache

/*
#include <ringcache.h>
*/
import "C"

import (
	"errors"
	"fmt"
)

var (
	// ErrCacheMiss means that a Get failed because the item wasn't present
	// (or every owner of the key is down).
	ErrCacheMiss = errors.New("memcache: cache miss")

	// ErrCASConflict means that a CompareAndSwap call failed due to the
	// cached value being modified between the Get and the CompareAndSwap.
	ErrCASConflict = errors.New("memcache: compare-and-swap conflict")

	// ErrNotStored means that a conditional write operation (i.e. Add or
	// CompareAndSwap) failed because the condition was not satisfied.
	ErrNotStored = errors.New("memcache: item not stored")

	// ErrServerError means that a server error occurred; an *Error with
	// CodeServer or CodeTooBig is errors.Is this.
	ErrServerError = errors.New("memcache: server error")

	// ErrNoStats means that no statistics were available.
	ErrNoStats = errors.New("memcache: no statistics available")

	// ErrMalformedKey is returned when an invalid key is used. Keys must be
	// at maximum 250 bytes long and not contain whitespace or control
	// characters.
	ErrMalformedKey = errors.New("malformed: key is too long or contains invalid characters")

	// ErrNoServers is returned when no servers are configured or
	// available; an *Error with CodeDown (every owner of the key is down)
	// is errors.Is this.
	ErrNoServers = errors.New("memcache: no servers configured or available")
)

// libringcache's codes (RINGCACHE_E* in ringcache.h), in Error.Code.
const (
	CodeNotFound    = int(C.RINGCACHE_ENOTFOUND)
	CodeNotStored   = int(C.RINGCACHE_ENOTSTORED)
	CodeExists      = int(C.RINGCACHE_EEXISTS)
	CodeInval       = int(C.RINGCACHE_EINVAL)
	CodeKey         = int(C.RINGCACHE_EKEY)
	CodeTooBig      = int(C.RINGCACHE_ETOOBIG)
	CodeNoMem       = int(C.RINGCACHE_ENOMEM)
	CodeDown        = int(C.RINGCACHE_EDOWN)
	CodeTimedOut    = int(C.RINGCACHE_ETIMEDOUT)
	CodeIO          = int(C.RINGCACHE_EIO)
	CodeProto       = int(C.RINGCACHE_EPROTO)
	CodeClient      = int(C.RINGCACHE_ECLIENT)
	CodeServer      = int(C.RINGCACHE_ESERVER)
	CodeNonNumeric  = int(C.RINGCACHE_ENONNUMERIC)
	CodeMembers     = int(C.RINGCACHE_EMEMBERS)
	CodeMoved       = int(C.RINGCACHE_EMOVED)
	CodeTryAgain    = int(C.RINGCACHE_ETRYAGAIN)
	CodeUnavailable = int(C.RINGCACHE_EUNAVAILABLE)
	CodeTLS         = int(C.RINGCACHE_ETLS)
	CodeAuth        = int(C.RINGCACHE_EAUTH)
)

// Error is a libringcache error other than those with a gomemcache
// sentinel: Code is the library's code, Op the call, Msg the reason.
type Error struct {
	Code int
	Op   string
	Msg  string
}

func (e *Error) Error() string {
	msg := e.Msg
	if msg == "" {
		msg = C.GoString(C.ringcache_strerror(C.int(e.Code)))
	}
	switch e.Code {
	case CodeClient, CodeNonNumeric:
		// gomemcache's wording for CLIENT_ERROR replies.
		return fmt.Sprintf("memcache: client error: %s: %s", e.Op, msg)
	case CodeServer, CodeTooBig:
		return fmt.Sprintf("memcache: server error: %s: %s", e.Op, msg)
	}
	return fmt.Sprintf("ringcache: %s: %s", e.Op, msg)
}

// Is makes errors.Is(err, ErrServerError) true for server errors and
// values too large, errors.Is(err, ErrNoServers) when every owner of the
// key is down.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrServerError:
		return e.Code == CodeServer || e.Code == CodeTooBig
	case ErrNoServers:
		return e.Code == CodeDown
	}
	return false
}

// Timeout is true when a node did not answer in time (as net.Error).
func (e *Error) Timeout() bool { return e.Code == CodeTimedOut }

// Temporary is true for conditions a retry may clear: a timeout, a key
// whose range is moving, an owner being failed over.
func (e *Error) Temporary() bool {
	switch e.Code {
	case CodeTimedOut, CodeTryAgain, CodeMoved, CodeUnavailable, CodeDown:
		return true
	}
	return false
}

// codeErr maps a libringcache code to gomemcache's sentinel errors, or an
// *Error for op.
func codeErr(op string, code C.int) error {
	switch int(code) {
	case 0:
		return nil
	case CodeNotFound:
		return ErrCacheMiss
	case CodeNotStored:
		return ErrNotStored
	case CodeExists:
		return ErrCASConflict
	case CodeKey:
		return ErrMalformedKey
	}
	return &Error{Code: int(code), Op: op}
}

// legalKey is gomemcache's key rule: at most 250 bytes, no space, control
// character or DEL (bytes above 0x7f are allowed, as memcached allows
// them).
func legalKey(key string) bool {
	if len(key) > 250 || len(key) == 0 {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] == 0x7f {
			return false
		}
	}
	return true
}
