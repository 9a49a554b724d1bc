#!/usr/bin/env python3
"""The classic text protocol against memcached, case by case: each input of
the table (malformed lines, bad numbers, swallowed data blocks, noreply,
token limits, and normal commands) is followed by a probe (`set probe` + its
block + `get probe`) that shows the stream is still in step, and is sent to a
standalone ringcached and to Debian's memcached 1.6.18 (started here on a
free port), whole, in 7-byte pieces and byte by byte.

The authority is memcached 1.6.45's source (proto_parser.c, proto_text.c,
vendor/mcmc/mcmc.c). Where 1.6.18 agrees with it, the replies must be byte
for byte those of 1.6.18. Where 1.6.18 differs, the case states the 1.6.45
reply literally and says why (`V145`); where ringcache deliberately departs
from 1.6.45 (shared notes/memcached-protocol.md), the case says so (`OURS`).
Skips when /usr/bin/memcached is missing (tests/deps.sh installs it). TAP.
"""
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rctest import Tap, Node, free_port, can_connect, recv_until, wait_until  # noqa: E402

MEMCACHED = "/usr/bin/memcached"
# Optional: a memcached 1.6.45 binary; when set, every V145 reply is also
# checked against it (how the literals below were confirmed).
MEMCACHED_1645 = os.environ.get("RC_MEMCACHED_1645")
STEPS = [("whole", 0, b"w"), ("7-byte pieces", 7, b"p"), ("byte by byte", 1, b"b")]
E_FMT = b"CLIENT_ERROR bad command line format\r\n"
E_EXP = b"CLIENT_ERROR invalid exptime argument\r\n"
E_DELTA = b"CLIENT_ERROR invalid numeric delta argument\r\n"
K250 = b"k" * 250
K251 = b"k" * 251
# More than 23 tokens: memcached's tokenizer keeps 23 and ignores the rest,
# so a noreply past the 23rd token is not seen.
T17 = b" ".join(b"%c" % (ord("a") + i) for i in range(17))
T26 = b" ".join(b"%c" % (ord("a") + i) for i in range(26))
N21 = b" ".join(b"%d" % i for i in range(1, 22))
N22 = b" ".join(b"%d" % i for i in range(1, 23))
MANY_KEYS = b" ".join(b"many%d" % i for i in range(500))   # a 4 KB get line

IN_STEP, CLOSED, NO_PROBE = "in step", "closed", "probe reply missing"
SAME = None


class Lit:
    """The reply ringcache must give where 1.6.18 is not the oracle: reply
    (before the probe's), closed (the server hangs up, no probe reply), why."""

    def __init__(self, reply, why, closed=False):
        self.reply = reply
        self.why = why
        self.closed = closed


def V145(reply, why, closed=False):
    """1.6.45 differs from 1.6.18 here; reply is 1.6.45's."""
    return Lit(reply, "1.6.45: " + why, closed)


def OURS(reply, why):
    """ringcache departs from 1.6.45 on purpose (the shared notes)."""
    return Lit(reply, "ringcache: " + why)


# (name, input, expectation). "$" in an input becomes a key unique to the
# case and the feed mode. SAME: byte-identical to memcached 1.6.18.
CASES = [
    # --- storage commands: normal ---
    ("set, get", b"set $ 5 0 3\r\nabc\r\nget $\r\n", SAME),
    ("set noreply, get", b"set $ 0 0 1 noreply\r\nx\r\nget $\r\n", SAME),
    ("bare newlines", b"set $ 0 0 1\nx\r\nget $\n", SAME),
    ("trailing spaces", b"set $ 0 0 1  \r\nx\r\nget $  \r\n", SAME),
    ("set with a trailing space", b"set $ 0 0 1 \r\nx\r\n", SAME),
    ("key of 250", b"set " + K250 + b" 0 0 1\r\nx\r\nget " + K250 + b"\r\n", SAME),
    ("add, add again, replace, append, prepend",
     b"add $ 0 0 1\r\nb\r\nadd $ 0 0 1\r\nz\r\nreplace $ 3 0 1\r\nc\r\n"
     b"append $ 0 0 1\r\nd\r\nprepend $ 0 0 1\r\na\r\nget $\r\n", SAME),
    ("replace, append missing", b"replace $ 0 0 1\r\nx\r\nappend $ 0 0 1\r\nx\r\n", SAME),
    ("replace noreply", b"replace $ 0 0 1 noreply\r\nx\r\n", SAME),
    ("cas missing", b"cas $ 0 0 1 1\r\nx\r\n", SAME),
    ("cas mismatch", b"set $ 0 0 1\r\nx\r\ncas $ 0 0 1 0\r\ny\r\nget $\r\n", SAME),
    ("empty value", b"set $ 0 0 0\r\n\r\nget $\r\n", SAME),
    ("negative exptime stores, expired", b"set $ 0 -1 1\r\nx\r\nget $\r\n", SAME),
    ("flags and exptime with a plus (strtoul)", b"set $ +1 +2 2\r\nab\r\nget $\r\n", SAME),
    ("flags and exptime -0", b"set $ -0 -0 2\r\nab\r\nget $\r\n", SAME),
    ("flags with many leading zeros", b"set $ 000000000000000000000005 0 2\r\nab\r\nget $\r\n",
     SAME),
    ("tab ends a flags number (strtoul)", b"set $ 5\t 0 2\r\nab\r\nget $\r\n", SAME),
    ("tab before a flags number", b"set $ \t5 0 2\r\nab\r\nget $\r\n", SAME),
    ("tab then junk in flags", b"set $ 5\tx 0 2\r\nab\r\nget $\r\n", SAME),
    ("exptime 2^32+100 is 100 (strtol, then int32)",
     b"set $ 0 4294967396 2\r\nab\r\nget $\r\n", SAME),
    ("exptime 2^31 is negative: expired", b"set $ 0 2147483648 2\r\nab\r\nget $\r\n", SAME),
    ("length -0", b"set $ 0 0 -0\r\n\r\nget $\r\n", SAME),
    ("length of 11 characters", b"set $ 0 0 00000000002\r\nab\r\nget $\r\n", SAME),
    # --- storage commands: a bad line whose length parses (swallow) ---
    ("cas without unique, trailing space (the issue)", b"cas $ 0 0 6 \r\nabcdef\r\n",
     V145(E_FMT, "the length parsed, so the block is swallowed; 1.6.18: ERROR, "
          "then ERROR for the block")),
    ("cas without unique", b"cas $ 0 0 6\r\nabcdef\r\n",
     V145(E_FMT, "block swallowed; 1.6.18: ERROR ERROR")),
    ("cas without unique, noreply", b"cas $ 0 0 6 noreply\r\nabcdef\r\n",
     V145(b"", "noreply is the unique, which does not parse: error hidden, block "
          "swallowed; 1.6.18: ERROR")),
    ("cas bad unique", b"cas $ 0 0 6 x\r\nabcdef\r\n",
     V145(E_FMT, "block swallowed; 1.6.18 does not swallow (ERROR follows)")),
    ("cas unique with a plus", b"cas $ 0 0 1 +1\r\nx\r\n",
     V145(E_FMT, "the unique is mcmc_toktou64 (digits only), block swallowed; "
          "1.6.18: NOT_FOUND")),
    ("cas unique -1", b"cas $ 0 0 1 -1\r\nx\r\n", V145(E_FMT, "swallowed; 1.6.18: ERROR follows")),
    ("cas unique 2^64", b"cas $ 0 0 1 18446744073709551616\r\nx\r\n",
     V145(E_FMT, "swallowed; 1.6.18: ERROR follows")),
    ("bad flags", b"set $ x 0 2\r\nab\r\n", V145(E_FMT, "swallowed; 1.6.18: ERROR follows")),
    ("bad exptime", b"set $ 0 x 2\r\nab\r\n", V145(E_FMT, "swallowed; 1.6.18: ERROR follows")),
    ("exptime out of long range", b"set $ 0 99999999999999999999 2\r\nab\r\nget $\r\n",
     V145(E_FMT + b"END\r\n", "swallowed; 1.6.18: ERROR follows")),
    ("flags 2^32", b"set $ 4294967296 0 2\r\nab\r\nget $\r\n",
     OURS(E_FMT + b"END\r\n", "flags >= 2^32 are rejected (memcached stores 0), swallowed")),
    ("key of 251", b"set " + K251 + b" 0 0 2\r\nab\r\n",
     V145(E_FMT, "swallowed; 1.6.18: ERROR follows")),
    ("key of 251, noreply", b"set " + K251 + b" 0 0 2 noreply\r\nab\r\n",
     V145(b"", "error hidden, swallowed; 1.6.18: ERROR")),
    ("bad flags, noreply", b"add $ x 0 1 noreply\r\nx\r\n",
     V145(b"", "error hidden, swallowed; 1.6.18: ERROR")),
    ("flags end at a NUL (strtoul)", b"set $ 5\x00 0 1\r\nx\r\nget $\r\n",
     V145(b"STORED\r\nVALUE $ 5 1\r\nx\r\nEND\r\n", "safe_strtoul stops at the NUL; "
          "1.6.18: ERROR ERROR")),
    ("exptime skips whitespace into the next token (strtol)",
     b"set $ 7 \t 0\r\n\r\nget $\r\n",
     V145(b"STORED\r\nVALUE $ 7 0\r\n\r\nEND\r\n", "5 tokens; the exptime `\\t` "
          "reads on to the length's 0; 1.6.18: ERROR")),
    # --- storage commands: extra tokens ---
    ("noreply not last", b"set $ 0 0 6 noreply extra\r\nabcdef\r\n",
     V145(b"STORED\r\n", "extra tokens ignored, noreply only as the last token; "
          "1.6.18: ERROR ERROR")),
    ("extra tokens", b"set $ 0 0 6 1 2 3\r\nabcdef\r\n",
     V145(b"STORED\r\n", "extra tokens ignored; 1.6.18: ERROR ERROR")),
    ("noreply as the 23rd token", b"set $ 0 0 1 " + T17 + b" noreply\r\nx\r\n",
     V145(b"", "23 tokens: noreply is the last; 1.6.18: ERROR ERROR")),
    ("noreply past the 23rd token", b"set $ 0 0 1 " + T26 + b" noreply\r\nx\r\n",
     V145(b"STORED\r\n", "the tokenizer keeps 23 tokens; 1.6.18: ERROR ERROR")),
    # --- storage commands: a bad length (no swallow) ---
    ("too few tokens", b"set $ 0 0\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("prepend, too few tokens", b"prepend $ 0 0\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("set alone", b"set\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("cas alone", b"cas\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("negative length", b"set $ 0 0 -1\r\n", SAME),
    ("length not a number", b"set $ 0 0 abc\r\n", SAME),
    ("length INT_MAX-1", b"set $ 0 0 2147483646\r\n", SAME),
    ("length INT_MAX", b"set $ 0 0 2147483647\r\n", SAME),
    ("length 2^31", b"set $ 0 0 2147483648\r\n", SAME),
    ("length INT_MIN", b"set $ 0 0 -2147483648\r\n", SAME),
    ("length with a plus", b"set $ +1 +2 +2\r\nab\r\n",
     V145(E_FMT + b"ERROR\r\n", "the length is mcmc_tokto32 (no plus): not swallowed, "
          "`ab` is a command; 1.6.18: STORED")),
    ("length -", b"set $ 0 0 -\r\n\r\nget $\r\n",
     V145(b"STORED\r\nVALUE $ 0 0\r\n\r\nEND\r\n", "mcmc_tokto32 reads a lone - as 0; "
          "1.6.18: CLIENT_ERROR")),
    ("length of 12 characters", b"set $ 0 0 000000000002\r\nab\r\nget $\r\n",
     V145(E_FMT + b"ERROR\r\nEND\r\n", "mcmc_tokto32 takes at most 11 characters; "
          "1.6.18: STORED")),
    ("length then CR and junk", b"set $ 0 0 1\rx\r\nx\r\n",
     V145(E_FMT + E_FMT, "the length token is `1\\rx`; then `x` is a line under 4 bytes; "
          "1.6.18: STORED")),
    ("bad length, noreply", b"set $ 0 0 x noreply\r\n",
     V145(E_FMT, "noreply is only looked at once the length parsed; 1.6.18: silent")),
    ("tab after the key", b"set $\t0 0 1\r\nx\r\n",
     V145(E_FMT + E_FMT, "4 tokens; `x` is a line under 4 bytes; 1.6.18: ERROR ERROR")),
    # --- the data block ---
    ("bad data chunk", b"set $ 0 0 2\r\nabc\r\n",
     V145(b"CLIENT_ERROR bad data chunk\r\n" + E_FMT, "the leftover `\\n` is a line under "
          "4 bytes; 1.6.18: ERROR")),
    ("bad data chunk, noreply", b"set $ 0 0 2 noreply\r\nabc\r\n",
     V145(E_FMT, "chunk error hidden; `\\n`: 1.6.18 says ERROR")),
    ("bad data chunk, bare newlines", b"set $ 0 0 2\r\nab\n\n", SAME),
    # --- get, gets ---
    ("get miss", b"get $\r\n", SAME),
    ("get hit, duplicates, miss", b"set $ 0 0 1\r\nx\r\nget $ nope $ $\r\n", SAME),
    ("gets miss", b"gets $\r\n", SAME),
    ("get noreply", b"set $ 0 0 1\r\nx\r\nget $ noreply\r\n", SAME),
    ("get of 500 keys (4 KB line)", b"get " + MANY_KEYS + b"\r\n", SAME),
    ("get alone", b"get\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("get and a space", b"get \r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("gets alone", b"gets\r\n", V145(E_FMT, "1.6.18: ERROR")),
    # 1.6.45 appends an empty line to this error (process_get_command_err
    # copies the line with its \r\n); the notes say not to copy that, so
    # these match 1.6.18.
    ("get key of 251", b"get " + K251 + b"\r\n", SAME),
    ("get key of 251 among others", b"get $ " + K251 + b" $\r\n", SAME),
    ("get key of 251 among hits: the only reply",
     b"set $ 0 0 1\r\nx\r\nget $ " + K251 + b" $\r\n",
     OURS(b"STORED\r\n" + E_FMT, "no VALUE lines, but the set's STORED stays (memcached "
          "frees every reply still queued, STORED too, when it is not yet written)")),
    ("get key of 251, noreply", b"get " + K251 + b" noreply\r\n", SAME),
    ("leading spaces", b"   get $\r\n",
     V145(b"ERROR\r\n", "the command is what precedes the first space; 1.6.18: END")),
    ("leading spaces, 4 KB get line", b"  get " + MANY_KEYS + b"\r\n",
     V145(b"ERROR\r\n", "kept open (a get prefix), then unknown; 1.6.18: END")),
    ("get with a HTTP/ last token", b"get / HTTP/1.1\r\n", SAME),
    # --- gat, gats ---
    ("gat hit", b"set $ 0 0 1\r\nx\r\ngat 100 $ nope\r\nget $\r\n", SAME),
    ("gat expires the item", b"set $ 0 0 1\r\nx\r\ngat -1 $\r\nget $\r\n", SAME),
    ("gats miss", b"gats 0 $\r\n", SAME),
    ("gat noreply is a key", b"gat 0 $ noreply\r\n", SAME),
    ("gat bad exptime", b"gat x $\r\n", SAME),
    ("gat INT_MIN", b"gat -2147483648 $\r\n", SAME),
    ("gat 11 characters", b"gat 00000000000 $\r\n", SAME),
    ("gat key of 251", b"gat 0 " + K251 + b"\r\n", SAME),
    ("gat alone", b"gat\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("gat without a key", b"gat 0\r\n", V145(E_FMT, "1.6.18: END")),
    ("gats without a key", b"gats 0\r\n", V145(E_FMT, "1.6.18: END")),
    ("gat bad exptime, no key", b"gat x\r\n",
     V145(E_FMT, "fewer than 3 tokens is a format error first; 1.6.18: invalid exptime")),
    ("gat exptime with a plus", b"gat +1 $\r\n", V145(E_EXP, "mcmc_tokto32; 1.6.18: END")),
    ("gat exptime -", b"gat - $\r\n", V145(b"END\r\n", "a lone - is 0; 1.6.18: invalid")),
    ("gat exptime 2^31", b"gat 2147483648 $\r\n", V145(E_EXP, "out of int32; 1.6.18: END")),
    ("gat exptime below INT_MIN", b"gat -2147483649 $\r\n",
     V145(E_EXP, "out of int32; 1.6.18: END")),
    ("gat 12 characters", b"gat 000000000000 $\r\n",
     V145(E_EXP, "at most 11 characters; 1.6.18: END")),
    # --- touch ---
    ("touch miss, hit", b"touch $ 10\r\nset $ 0 0 1\r\nx\r\ntouch $ 100\r\nget $\r\n", SAME),
    ("touch bad exptime", b"touch $ x\r\n", SAME),
    ("touch noreply", b"touch $ 0 noreply\r\n", SAME),
    ("touch bad exptime, noreply", b"touch $ x noreply\r\n", SAME),
    ("touch key of 251", b"touch " + K251 + b" 0\r\n", SAME),
    ("touch key of 251, bad exptime", b"touch " + K251 + b" x\r\n", SAME),
    ("touch without exptime", b"touch $\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("touch alone", b"touch\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("touch extra tokens", b"touch $ 0 1 2\r\n",
     V145(b"NOT_FOUND\r\n", "extra tokens ignored; 1.6.18: ERROR")),
    ("touch noreply not last", b"touch $ 10 noreply extra\r\n",
     V145(b"NOT_FOUND\r\n", "extra tokens ignored; 1.6.18: ERROR")),
    ("touch exptime with a plus", b"touch $ +1\r\n",
     V145(E_EXP, "mcmc_tokto32; 1.6.18: NOT_FOUND")),
    ("touch exptime -", b"touch $ -\r\n", V145(b"NOT_FOUND\r\n", "- is 0; 1.6.18: invalid")),
    ("touch exptime 2^31", b"touch $ 2147483648\r\n",
     V145(E_EXP, "out of int32; 1.6.18: NOT_FOUND")),
    # --- incr, decr ---
    ("incr, decr", b"set $ 0 0 2\r\n10\r\nincr $ 5\r\ndecr $ 3\r\ndecr $ 100\r\n", SAME),
    ("incr wraps", b"set $ 0 0 20\r\n18446744073709551615\r\nincr $ 1\r\n", SAME),
    ("incr miss", b"incr $ 1\r\ndecr $ 1\r\n", SAME),
    ("incr non-numeric", b"set $ 0 0 1\r\nx\r\nincr $ 1\r\n", SAME),
    ("incr non-numeric, noreply", b"set $ 0 0 1\r\nx\r\nincr $ 1 noreply\r\n", SAME),
    ("incr bad delta", b"incr $ x\r\n", SAME),
    ("incr negative delta", b"incr $ -1\r\n", SAME),
    ("incr delta 2^64", b"incr $ 18446744073709551616\r\n", SAME),
    ("incr delta 2^64-1", b"incr $ 18446744073709551615\r\n", SAME),
    ("incr delta of 22 characters", b"incr $ 0000000000000000000001\r\n", SAME),
    ("incr noreply", b"set $ 0 0 1\r\n1\r\nincr $ 1 noreply\r\nget $\r\n", SAME),
    ("decr noreply", b"decr $ 1 noreply\r\n", SAME),
    ("incr noreply as the delta", b"incr $ noreply\r\n", SAME),
    ("incr one extra token", b"set $ 0 0 1\r\n1\r\nincr $ 1 2\r\n", SAME),
    ("incr key of 251", b"incr " + K251 + b" 1\r\n", SAME),
    ("incr without delta", b"incr $\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("decr without delta", b"decr $\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("incr alone", b"incr\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("incr extra tokens", b"incr $ 1 2 3\r\n",
     V145(b"NOT_FOUND\r\n", "extra tokens ignored; 1.6.18: ERROR")),
    ("incr delta with a plus", b"incr $ +1\r\n",
     V145(E_DELTA, "mcmc_toktou64 (digits only); 1.6.18: NOT_FOUND")),
    ("incr delta of 23 characters", b"incr $ 00000000000000000000001\r\n",
     V145(E_DELTA, "at most 22 characters; 1.6.18: NOT_FOUND")),
    ("incr delta ends at a NUL", b"incr $ 1\x00\r\n",
     V145(E_DELTA, "the NUL is part of the token; 1.6.18: NOT_FOUND")),
    # --- delete ---
    ("delete miss, hit", b"delete $\r\nset $ 0 0 1\r\nx\r\ndelete $\r\nget $\r\n", SAME),
    ("delete 0", b"set $ 0 0 1\r\nx\r\ndelete $ 0\r\n", SAME),
    ("delete noreply", b"set $ 0 0 1\r\nx\r\ndelete $ noreply\r\nget $\r\n", SAME),
    ("delete 0 noreply", b"delete $ 0 noreply\r\n", SAME),
    ("delete hold time, noreply", b"delete $ 1 noreply\r\n", SAME),
    ("delete key of 251", b"delete " + K251 + b"\r\n", SAME),
    ("delete key of 251, noreply", b"delete " + K251 + b" noreply\r\n", SAME),
    ("delete alone", b"delete\r\n", V145(E_FMT, "1.6.18: ERROR")),
    # 1.6.45 ignores these extra tokens (NOT_FOUND); the notes keep 1.6.18's
    # rule, which memccapable's `delete a b c d e` needs, with 1.6.45's message.
    ("delete hold time", b"delete $ 1\r\n",
     OURS(E_FMT, "1.6.18's rule (1.6.45: NOT_FOUND); 1.6.18 adds `.  Usage: ...`")),
    ("delete 0 0", b"delete $ 0 0\r\n", OURS(E_FMT, "1.6.18's rule (1.6.45: NOT_FOUND)")),
    ("delete noreply 0", b"delete $ noreply 0\r\n",
     OURS(E_FMT, "1.6.18's rule (1.6.45: NOT_FOUND)")),
    ("delete extra tokens", b"delete $ x y z\r\n",
     OURS(E_FMT, "an error as in 1.6.18 (which says ERROR); 1.6.45: NOT_FOUND")),
    # --- verbosity ---
    ("verbosity 0", b"verbosity 0\r\n", SAME),
    ("verbosity noreply", b"verbosity 0 noreply\r\n", SAME),
    ("verbosity bad level", b"verbosity x\r\n", SAME),
    ("verbosity noreply as the level", b"verbosity noreply\r\n", SAME),
    ("verbosity noreply first", b"verbosity noreply 0\r\n", SAME),
    ("verbosity alone", b"verbosity\r\n", V145(E_FMT, "1.6.18: ERROR")),
    ("verbosity extra tokens", b"verbosity 0 2 3\r\n",
     V145(b"OK\r\n", "extra tokens ignored; 1.6.18: ERROR")),
    ("verbosity noreply not last", b"verbosity 0 noreply x\r\n",
     V145(b"OK\r\n", "extra tokens ignored; 1.6.18: ERROR")),
    ("verbosity with a plus", b"verbosity +0\r\n",
     V145(E_FMT, "mcmc_toktou32; 1.6.18: OK")),
    ("verbosity 2^32", b"verbosity 4294967296\r\n", V145(E_FMT, "out of u32; 1.6.18: OK")),
    ("verbosity level then a tab", b"verbosity 0\t\r\n",
     V145(E_FMT, "the tab is part of the token; 1.6.18: OK")),
    # --- flush_all ---
    ("flush_all", b"flush_all\r\n", SAME),
    ("flush_all 0", b"flush_all 0\r\n", SAME),
    ("flush_all -1", b"flush_all -1\r\n", SAME),
    ("flush_all 11 characters", b"flush_all 00000000000\r\n", SAME),
    ("flush_all bad delay", b"flush_all x\r\n", SAME),
    ("flush_all noreply", b"flush_all noreply\r\n", SAME),
    ("flush_all 0 noreply", b"flush_all 0 noreply\r\n", SAME),
    ("flush_all noreply first", b"flush_all noreply 0\r\n", SAME),
    ("flush_all bad delay, noreply", b"flush_all noreply noreply\r\n", SAME),
    ("flush_all one extra token", b"flush_all 0 0\r\n", SAME),
    ("flush_all leading space", b" flush_all\r\n", SAME),
    ("flush_all extra tokens", b"flush_all 0 0 0\r\n",
     V145(b"OK\r\n", "extra tokens ignored; 1.6.18: ERROR")),
    ("flush_all noreply not last", b"flush_all 0 noreply extra\r\n",
     V145(b"OK\r\n", "extra tokens ignored; 1.6.18: ERROR")),
    ("flush_all extra tokens, noreply", b"flush_all 0 x noreply\r\n",
     V145(b"", "extra tokens ignored; 1.6.18: ERROR")),
    ("flush_all delay with a plus", b"flush_all +0\r\n",
     V145(E_EXP, "mcmc_tokto32; 1.6.18: OK")),
    ("flush_all delay -", b"flush_all -\r\n", V145(b"OK\r\n", "- is 0; 1.6.18: invalid")),
    ("flush_all delay 2^31", b"flush_all 2147483648\r\n",
     V145(E_EXP, "out of int32; 1.6.18: OK")),
    # --- version, quit, stats ---
    ("version noreply", b"version noreply\r\n",
     OURS(b"<VERSION>", "our version string (notes); noreply is not recognized")),
    ("version, many tokens", b"version " + T26 + b"\r\n",
     OURS(b"<VERSION>", "our version string (notes)")),
    ("quit", b"quit\r\n", SAME),
    ("quit with tokens", b"quit now\r\n", SAME),
    ("stats noreply", b"stats noreply\r\n", SAME),
    ("stats and a tab", b"stats\tx\r\n", SAME),
    # --- unknown commands and framing ---
    ("wrong case", b"SET $ 0 0 1\r\nx\r\n",
     V145(b"ERROR\r\n" + E_FMT, "`x` is a line under 4 bytes; 1.6.18: ERROR ERROR")),
    ("unknown", b"bogus\r\n", SAME),
    ("two letters", b"ab\r\n", SAME),
    ("three letters, bare newline", b"xyz\n", SAME),
    ("only spaces", b"   \r\n", SAME),
    ("empty line", b"\r\n", V145(E_FMT, "a line under 4 bytes; 1.6.18: ERROR")),
    ("bare newline", b"\n", V145(E_FMT, "a line under 4 bytes; 1.6.18: ERROR")),
    ("one letter", b"a\r\n", V145(E_FMT, "a line under 4 bytes; 1.6.18: ERROR")),
    ("CR CR LF", b"\r\r\n", V145(E_FMT, "a line under 4 bytes; 1.6.18: ERROR")),
    ("two spaces, bare newline", b"  \n", V145(E_FMT, "a line under 4 bytes; 1.6.18: ERROR")),
    ("leading space before version", b" version\r\n",
     V145(b"ERROR\r\n", "the command is what precedes the first space; 1.6.18: VERSION")),
    ("unknown, noreply", b"foo noreply\r\n",
     V145(b"", "unknown commands honour a last noreply; 1.6.18: ERROR")),
    ("noreply alone", b"noreply\r\n", V145(b"", "its last token is noreply; 1.6.18: ERROR")),
    ("unknown, noreply as the 23rd token", b"foo " + N21 + b" noreply\r\n",
     V145(b"", "1.6.18: ERROR")),
    ("HTTP/ alone", b"HTTP/1.1\r\n",
     V145(b"ERROR\r\n", "the close needs 2 tokens or more; 1.6.18 closes")),
    ("HTTP/ last", b"foo bar HTTP/1.0\r\n", SAME),
    ("HTTP/ not last", b"foo HTTP/1.0 bar\r\n", SAME),
    ("HTTP request", b"GET / HTTP/1.1\r\n", SAME),
    ("HTTP/ as the 23rd token", b"foo " + N21 + b" HTTP/1.1\r\n", SAME),
    ("HTTP/ past the 23rd token", b"foo " + N22 + b" HTTP/1.1\r\n", SAME),
    ("a line of 2048 bytes is kept", b"set " + b"k" * 2043 + b"\r\n",
     V145(E_FMT, "closes only past 2048 bytes without a newline; 2 tokens; "
          "1.6.18: ERROR")),
]

PROBE = b"set probe 0 0 %d\r\n%s\r\nget probe\r\n"
PROBE_REPLY = b"STORED\r\nVALUE probe 0 %d\r\n%s\r\nEND\r\n"


def exchange(port, data, step, probe_reply, timeout=5.0):
    """Send data (in pieces of step bytes; 0: at once) on a new connection;
    read until the probe's reply ends the stream, the server closes, or the
    deadline. Returns (reply before the probe's, IN_STEP | CLOSED | NO_PROBE)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    state = NO_PROBE
    try:
        try:
            if step == 0:
                s.sendall(data)
            else:
                for i in range(0, len(data), step):
                    s.sendall(data[i:i + step])
        except (BrokenPipeError, ConnectionResetError):
            pass
        deadline = time.monotonic() + timeout
        while not buf.endswith(probe_reply):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                d = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                d = b""
            if not d:
                state = CLOSED
                break
            buf += d
    finally:
        s.close()
    if buf.endswith(probe_reply):
        return buf[:-len(probe_reply)], IN_STEP
    return buf, state


def start_memcached(binary):
    """A memcached on a free loopback port (no UDP); (Popen, port)."""
    for _ in range(5):
        port = free_port()
        cmd = [binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "64", "-t", "2"]
        if os.geteuid() == 0:
            cmd += ["-u", "root"]
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        if wait_until(lambda: p.poll() is not None or can_connect(port), 10) \
                and p.poll() is None:
            return p, port
        stop(p)
    raise RuntimeError("%s did not start" % binary)


def stop(p):
    """Stop a process started here, by its PID."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main():
    if not os.access(MEMCACHED, os.X_OK):
        print("1..0 # SKIP %s missing (tests/deps.sh installs Debian's memcached)"
              % MEMCACHED)
        return 0
    tap = Tap()
    node = Node(args=["-t", "2", "-m", "64"])
    procs = []
    try:
        node.start()
        mc, mc_port = start_memcached(MEMCACHED)
        procs.append(mc)
        m145_port = None
        if MEMCACHED_1645:
            m145, m145_port = start_memcached(MEMCACHED_1645)
            procs.append(m145)
        s = node.connect()
        s.sendall(b"version\r\n")
        version = recv_until(s, b"\r\n", timeout=5)
        s.close()
        tap.ok(version.startswith(b"VERSION ") and version.endswith(b"\r\n"),
               "ringcached answers version", version)
        for mode, step, prefix in STEPS:
            for i, (name, data, want) in enumerate(CASES):
                key = b"%s%d" % (prefix, i)
                data = data.replace(b"$", key)
                probe_reply = PROBE_REPLY % (len(key), key)
                feed = data + PROBE % (len(key), key)
                got = exchange(node.port, feed, step, probe_reply)
                ref = exchange(mc_port, feed, step, probe_reply)
                desc = "%s (%s)" % (name, mode)
                if want is SAME:
                    tap.ok(got == ref, desc + ": as memcached 1.6.18",
                           "input:     %r\nringcache: %r\nmemcached: %r" % (data, got, ref))
                    continue
                reply = want.reply.replace(b"$", key).replace(b"<VERSION>", version)
                exp = (reply, CLOSED if want.closed else IN_STEP)
                tap.ok(got == exp, desc + ": " + want.why,
                       "input:     %r\nringcache: %r\nwant:      %r\n1.6.18:    %r"
                       % (data, got, exp, ref))
                if m145_port is not None and want.why.startswith("1.6.45"):
                    r145 = exchange(m145_port, feed, step, probe_reply)
                    tap.ok(r145 == exp, desc + ": the literal is what %s answers"
                           % MEMCACHED_1645, "1.6.45: %r\nwant:   %r" % (r145, exp))
        tap.ok(node.alive(), "ringcached still running")
    finally:
        node.stop()
        for p in procs:
            stop(p)
    tap.done()


if __name__ == "__main__":
    sys.exit(main())
