#!/usr/bin/env python3
"""The meta protocol (mg ms md ma mn me) on one ringcached node, as memcached
1.6.45 answers it (doc/protocol.txt "Meta Commands" .. "Meta No-Op" and the
behaviour of its proto_parser.c / proto_text.c): a table of cases, every
flag of every command and the bad ones, each fed whole, in 7-byte pieces
and byte by byte, each followed by the probe `mn` -> `MN` (the stream is in
step). Then a herd on one node (50 connections, `mg <missing> N30 c v t`:
exactly one W) and stale-while-revalidate (`md I`: exactly one X W).

The same table runs against Debian's memcached 1.6.18 (/usr/bin/memcached,
or $RC_MEMCACHED) for the cases where 1.6.18 answers as 1.6.45 does (each
other case says why not and is skipped there), and, when
$RC_MEMCACHED_1645 names a memcached 1.6.45 binary, against that one in
full (a check of the table itself). Replies that depend on time (t, l,
exp=, la=) are checked with ranges; CAS values are captured from one reply
and compared in the next (they are the server's own). TAP."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402
import meta_lib as ml  # noqa: E402
from meta_lib import Case, S, setup  # noqa: E402
from rctest import Node  # noqa: E402

CRLF = "\r\n"
O31 = "O" + "o" * 31          # the longest opaque token (32 bytes with the O)
O32 = "O" + "o" * 32          # one byte too long
MG18 = "c f h k l O P L q s t u v T1 R1 N1 E1 C1"   # 18 flags: 20 tokens, the limit
MG19 = MG18 + " x"                                  # 19 flags: too many


def put(key="{k}", val="hi", flags=0, ttl=0):
    """Classic set as a set-up step."""
    return setup("set %s %d %d %d\r\n%s\r\n" % (key, flags, ttl, len(val), val), "STORED\r\n")


def cas_of(key="{k}", val="hi", flags=0, var="cas"):
    """Classic gets as a set-up step: the item's CAS into `var`."""
    return setup("gets %s\r\n" % key,
                 "VALUE %s %d %d (?%s)\r\n%s\r\nEND\r\n" % (key, flags, len(val), var, val))


def mput(key="{k}", val="hi", flags=0, ttl=0, var="cas"):
    """ms as a set-up step that leaves the item unfetched: its CAS into
    `var` (a classic gets would mark it fetched)."""
    return S("ms %s %d F%d T%d c\r\n%s\r\n" % (key, len(val), flags, ttl, val),
             "HD c(?%s)\r\n" % var)


def gets_is(key="{k}", val="hi", flags=0, var="cas"):
    """Classic gets as a check: the item's CAS equals variable `var`."""
    return setup("gets %s\r\n" % key,
                 "VALUE %s %d %d {%s}\r\n%s\r\nEND\r\n" % (key, flags, len(val), var, val))


def err(line, msg):
    """A one-step case body: line answered with msg."""
    return [S(line, msg + CRLF)]


BADFMT = "CLIENT_ERROR bad command line format"
BADTOK = "CLIENT_ERROR bad token in command line format"
INVAL = "CLIENT_ERROR invalid flag"
DUP = "CLIENT_ERROR duplicate flag"
OPAQ = "CLIENT_ERROR opaque token too long"
TOOMANY = "CLIENT_ERROR options flags are too long"
MAERR = "CLIENT_ERROR invalid or duplicate flag"
ME_HIT = "ME {k} exp=-1 la=(?:0..1) cas={cas} fetch=%s cls=(?*) size=(?*)\r\n"

CASES = [
    # ------------------------------------------------------------ mn
    Case("mn -> MN", [S("mn\r\n", "MN\r\n", probe=False)]),
    Case("mn ignores arguments", [S("mn foo bar\r\n", "MN\r\n")]),
    Case("mn with a bare LF: 3 bytes, too short a command for 1.6.45",
         [S("mn\n", BADFMT + CRLF)], old="1.6.18 answers MN"),

    # ------------------------------------------------------------ me
    Case("me miss -> EN", [S("me {k}\r\n", "EN\r\n")]),
    Case("me hit: exp=-1 la cas fetch=no", [mput(), S("me {k}\r\n", ME_HIT % "no")]),
    Case("me after a fetch: fetch=yes; exp is the remaining TTL",
         [put(ttl=100), cas_of(), S("mg {k} v\r\n", "VA 2\r\nhi\r\n"),
          S("me {k}\r\n", "ME {k} exp=(?:99..100) la=(?:0..1) cas={cas} fetch=yes "
            "cls=(?*) size=(?*)\r\n")], old="1.6.18's me prints exp negated"),
    Case("me does not bump: the next mg h still sees h0",
         [put(), S("me {k}\r\n", "ME {k} exp=-1 la=(?:0..1) cas=(?*) fetch=no cls=(?*) size=(?*)\r\n"),
          S("mg {k} h\r\n", "HD h0\r\n")]),
    Case("me without a key", err("me\r\n", BADFMT)),
    Case("me ignores a token other than b", [mput(), S("me {k} zz\r\n", ME_HIT % "no")]),
    Case("me key of 251 bytes", err("me {long}\r\n", BADFMT)),
    Case("me <base64> b with three tokens: 1.6.45 looks the base64 text up (its ntokens >= 4 "
         "test), EN",
         [S("ms {bk} 2 b\r\nhi\r\n", "HD\r\n"), S("me {bk} b\r\n", "EN\r\n")],
         old="1.6.18 decodes the key of `me KEY b`"),
    Case("me <base64> b with a fourth token: decoded, the key printed in base64",
         [S("ms {bk} 2 b c\r\nhi\r\n", "HD c(?cas)\r\n"),
          S("me {bk} b x\r\n", "ME {bk} exp=-1 la=(?:0..1) cas={cas} fetch=no cls=(?*) "
            "size=(?*)\r\n")]),

    # ------------------------------------------------------------ mg: retrieval flags
    Case("mg miss -> EN", [S("mg {k} v\r\n", "EN\r\n")]),
    Case("mg miss without flags -> EN", [S("mg {k}\r\n", "EN\r\n")]),
    Case("mg miss echoes O and k: EN Oab k<key>", [S("mg {k} Oab k v\r\n", "EN Oab k{k}\r\n")]),
    Case("mg miss with q: nothing", [S("mg {k} v q\r\n", "")]),
    Case("mg miss with q O k: nothing", [S("mg {k} q Oab k\r\n", "")]),
    Case("mg hit without flags -> HD", [put(), S("mg {k}\r\n", "HD\r\n")]),
    Case("mg hit v -> VA 2 + data", [put(), S("mg {k} v\r\n", "VA 2\r\nhi\r\n")]),
    Case("mg hit s v f t c k O h l: flags in request order",
         [mput(flags=5, ttl=100),
          S("mg {k} s v f t c k Oxx h l\r\n",
            "VA 2 s2 f5 t(?:99..100) c{cas} k{k} Oxx h0 l(?:0..1)\r\nhi\r\n")]),
    Case("mg flags in another order",
         [put(flags=5), cas_of(flags=5),
          S("mg {k} k c f v s\r\n", "VA 2 k{k} c{cas} f5 s2\r\nhi\r\n")]),
    Case("mg t on an item without TTL: t-1", [put(), S("mg {k} t\r\n", "HD t-1\r\n")]),
    Case("mg h: h0 on the first fetch, h1 after", [put(), S("mg {k} h\r\n", "HD h0\r\n"),
                                                   S("mg {k} h\r\n", "HD h1\r\n")]),
    Case("mg u: the fetch is not recorded (h0 after u)",
         [put(), S("mg {k} h u\r\n", "HD h0\r\n"), S("mg {k} v u\r\n", "VA 2\r\nhi\r\n"),
          S("mg {k} h\r\n", "HD h0\r\n"), S("mg {k} h\r\n", "HD h1\r\n")]),
    Case("mg l: seconds since the last access (0, then about 2 after 2 s)",
         [put(), S("mg {k} l\r\n", "HD l(?:0..1)\r\n"),
          S("mg {k} l\r\n", "HD l(?:1..3)\r\n", sleep=2.1)], modes=["whole"]),
    Case("mg q on a hit: HD and VA still sent", [put(), S("mg {k} q\r\n", "HD\r\n"),
                                                 S("mg {k} q v\r\n", "VA 2\r\nhi\r\n")]),
    Case("mg k on a hit", [put(), S("mg {k} k\r\n", "HD k{k}\r\n")]),
    Case("mg O of 32 bytes (with the O) is echoed", [put(), S("mg {k} %s\r\n" % O31,
                                                              "HD %s\r\n" % O31)]),
    Case("mg O without a token: ' O' echoed", [put(), S("mg {k} O\r\n", "HD O\r\n")]),
    Case("mg P and L tokens are ignored", [put(), S("mg {k} v Pfoo Lbar/\r\n", "VA 2\r\nhi\r\n")]),
    Case("mg extra spaces between tokens", [put(), S("mg {k}  v   s\r\n", "VA 2 s2\r\nhi\r\n")]),
    Case("mg with a bare LF", [put(), S("mg {k} v\n", "VA 2\r\nhi\r\n")]),
    Case("mg of a value holding CRLF", [S("ms {k} 4\r\na\r\nb\r\n", "HD\r\n"),
                                        S("mg {k} v s\r\n", "VA 4 s4\r\na\r\nb\r\n")]),
    Case("mg of a zero-length value", [S("ms {k} 0\r\n\r\n", "HD\r\n"),
                                       S("mg {k} v s\r\n", "VA 0 s0\r\n\r\n")]),
    Case("mg C with the item's CAS: HD, no value (c still returned)",
         [put(), cas_of(), S("mg {k} v C{cas}\r\n", "HD\r\n"),
          S("mg {k} C{cas} v c\r\n", "HD c{cas}\r\n")], old="1.6.18 has no mg C"),
    Case("mg C with another CAS: the value", [put(), cas_of(),
                                              S("mg {k} v C{cas+1}\r\n", "VA 2\r\nhi\r\n")]),
    Case("mg quiet pipeline ended by mn: only the hit",
         [put("{k2}", "B"),
          S("mg {k} v q\r\nmg {k2} v q k\r\nmg {k3} v q\r\nmn\r\n", "VA 1 k{k2}\r\nB\r\nMN\r\n")]),
    Case("classic and meta commands in one pipeline",
         [S("set {k} 0 0 1\r\na\r\nmg {k} v\r\nget {k}\r\nms {k} 1 MA\r\nb\r\ngets {k2}\r\n"
            "md {k} q\r\ndelete {k}\r\nmn\r\n",
            "STORED\r\nVA 1\r\na\r\nVALUE {k} 0 1\r\na\r\nEND\r\nHD\r\nEND\r\nNOT_FOUND\r\n"
            "MN\r\n")]),

    # ------------------------------------------------------------ mg: T N R E, W X Z
    Case("mg T: new TTL; t before T shows the old one",
         [put(), S("mg {k} t T30\r\n", "HD t-1\r\n"), S("mg {k} T60 t\r\n", "HD t(?:59..60)\r\n"),
          S("mg {k} t\r\n", "HD t(?:59..60)\r\n")]),
    Case("mg T-1: served once, then expired", [put(), S("mg {k} T-1 v\r\n", "VA 2\r\nhi\r\n"),
                                                S("mg {k} v\r\n", "EN\r\n")]),
    Case("mg N on a miss: an empty item, W; then Z",
         [S("mg {k} N30 c v t\r\n", "VA 0 c(?cas) t(?:29..30) W\r\n\r\n"),
          S("mg {k} N30 c v t\r\n", "VA 0 c{cas} t(?:29..30) Z\r\n\r\n"),
          S("me {k}\r\n", "ME {k} exp=(?:29..30) la=(?:0..1) cas={cas} fetch=yes cls=(?*) "
            "size=(?*)\r\n")], old="1.6.18's me prints exp negated"),
    Case("mg N: the TTL is set at N's place (t before N: -1)",
         [S("mg {k} t N30\r\n", "HD t-1 W\r\n"), S("mg {k} t N30\r\n", "HD t(?:29..30) Z\r\n")]),
    Case("mg N on a hit: no W", [put(), S("mg {k} N30 v\r\n", "VA 2\r\nhi\r\n")]),
    Case("mg E on a hit: the CAS is unchanged", [mput(), S("mg {k} E5 c\r\n", "HD c{cas}\r\n")],
         old="1.6.18 has no mg E"),
    Case("mg T0: no TTL any more", [put(ttl=100), S("mg {k} v T0 t\r\n", "VA 2 t-1\r\nhi\r\n"),
                                    S("mg {k} t\r\n", "HD t-1\r\n")]),
    Case("mg N, then ms: the token is gone",
         [S("mg {k} N30\r\n", "HD W\r\n"), S("ms {k} 3 T30\r\nnew\r\n", "HD\r\n"),
          S("mg {k} N30 v\r\n", "VA 3\r\nnew\r\n")]),
    Case("mg N with E: the vivified item has that CAS",
         [S("mg {k} N30 E4242 c\r\n", "HD c4242 W\r\n"), S("mg {k} c\r\n", "HD c4242 Z\r\n")],
         old="1.6.18 has no mg E"),
    Case("mg R: W when the TTL left is below the token, once; then Z",
         [put(ttl=10), S("mg {k} R30 v\r\n", "VA 2 W\r\nhi\r\n"),
          S("mg {k} R30 v\r\n", "VA 2 Z\r\nhi\r\n"), S("mg {k} R5 v\r\n", "VA 2 Z\r\nhi\r\n")]),
    Case("mg R: no win above the token, none without a TTL",
         [put(ttl=100), S("mg {k} R30 v\r\n", "VA 2\r\nhi\r\n"), put("{k2}"),
          S("mg {k2} R30 v\r\n", "VA 2\r\nhi\r\n")]),
    Case("md I, then mg: X W once, then Z X; ms clears the mark",
         [put(), S("md {k} I\r\n", "HD\r\n"), S("mg {k} v c\r\n", "VA 2 c(?cas) X W\r\nhi\r\n"),
          S("mg {k} v c\r\n", "VA 2 c{cas} Z X\r\nhi\r\n"), S("ms {k} 3\r\nnew\r\n", "HD\r\n"),
          S("mg {k} v\r\n", "VA 3\r\nnew\r\n")]),
    Case("mg 18 flags (20 tokens) is accepted: a vivify with every flag",
         [S("mg {k} %s\r\n" % MG18, "HD c1 f0 h0 k{k} l0 O s0 t-1 W\r\n")],
         old="1.6.18 counts 20 tokens as too many"),

    # ------------------------------------------------------------ mg: b
    Case("mg b: a base64 key; k echoes it with b; the base64 text is another key",
         [S("ms {bk} 2 b\r\nhi\r\n", "HD\r\n"), S("mg {bk} b k v\r\n", "VA 2 k{bk} b\r\nhi\r\n"),
          S("mg {bk} v\r\n", "EN\r\n")]),
    Case("mg b miss: EN k<base64> b", [S("mg {bk2} b k v\r\n", "EN k{bk2} b\r\n")]),
    Case("mg b with a key that is not base64", err("mg !!!! b\r\n",
                                                   "CLIENT_ERROR error decoding key")),

    # ------------------------------------------------------------ mg: errors
    Case("mg without a key", err("mg\r\n", BADFMT), old="1.6.18 answers ERROR"),
    Case("mg key of 251 bytes", err("mg {long} v\r\n", BADFMT)),
    Case("mg key of 250 bytes", [S("ms {k250} 2\r\nhi\r\n", "HD\r\n"),
                                 S("mg {k250} v k\r\n", "VA 2 k{k250}\r\nhi\r\n")]),
    Case("mg unknown flag", err("mg {k} v j\r\n", INVAL)),
    Case("mg flag token starting with a digit", err("mg {k} 5\r\n", INVAL)),
    Case("mg flag token starting with punctuation: the line is rejected",
         err("mg {k} v !\r\n", BADFMT), old="1.6.18 answers invalid flag"),
    Case("mg duplicate flag", err("mg {k} v v\r\n", DUP)),
    Case("mg duplicate O", err("mg {k} Oa Ob\r\n", DUP)),
    Case("mg O of 33 bytes on a miss", err("mg {k} %s\r\n" % O32, OPAQ)),
    Case("mg O of 33 bytes on a hit", [put(), S("mg {k} v %s\r\n" % O32, OPAQ + CRLF)]),
    Case("mg N without a token", err("mg {k} N\r\n", BADTOK)),
    Case("mg N not a number", err("mg {k} Nabc\r\n", BADTOK)),
    Case("mg T not a number", err("mg {k} T1x\r\n", BADTOK)),
    Case("mg R without a token", err("mg {k} R\r\n", BADTOK)),
    Case("mg R beyond 32 bits", err("mg {k} R99999999999\r\n", BADTOK),
         old="1.6.18 accepts it"),
    Case("mg C not a number", err("mg {k} Cabc\r\n", BADTOK)),
    Case("mg E negative", err("mg {k} E-1\r\n", BADTOK), old="1.6.18 has no mg E"),
    Case("mg 19 flags: too many", err("mg {k} %s\r\n" % MG19, TOOMANY)),
    Case("mg 30 flags: too many", err("mg {k} %s a b d e g i j m n o y\r\n" % MG19, TOOMANY)),

    # ------------------------------------------------------------ ms
    Case("ms stores; mg reads flags 0, no TTL",
         [S("ms {k} 2\r\nhi\r\n", "HD\r\n"), S("mg {k} v f t\r\n", "VA 2 f0 t-1\r\nhi\r\n")]),
    Case("ms c k s O in request order; c is the item's CAS",
         [S("ms {k} 2 c k s O1\r\nhi\r\n", "HD c(?cas) k{k} s2 O1\r\n"), gets_is()],
         old="1.6.18 leaves out s"),
    Case("ms F T", [S("ms {k} 2 F7 T100\r\nhi\r\n", "HD\r\n"),
                    S("mg {k} f t v\r\n", "VA 2 f7 t(?:99..100)\r\nhi\r\n")]),
    Case("ms F of 2^32-1", [S("ms {k} 2 F4294967295\r\nhi\r\n", "HD\r\n"),
                            S("mg {k} f\r\n", "HD f4294967295\r\n")]),
    Case("ms T-1: stored expired", [S("ms {k} 2 T-1\r\nhi\r\n", "HD\r\n"),
                                    S("mg {k} v\r\n", "EN\r\n")]),
    Case("ms q: HD hidden", [S("ms {k} 2 q\r\nhi\r\n", ""), S("mg {k} v\r\n", "VA 2\r\nhi\r\n")]),
    Case("ms q: NS still sent", [S("ms {k} 2 q MR\r\nhi\r\n", "NS\r\n")]),
    Case("ms ME (add): HD on a miss, NS c0 on a hit, value kept",
         [S("ms {k} 2 ME\r\naa\r\n", "HD\r\n"), S("ms {k} 2 ME c\r\nbb\r\n", "NS c0\r\n"),
          S("mg {k} v\r\n", "VA 2\r\naa\r\n")]),
    Case("ms ME on an item: NS, the item not marked fetched (mg h0)",
         [put(), S("ms {k} 1 ME\r\nx\r\n", "NS\r\n"), S("mg {k} h\r\n", "HD h0\r\n")]),
    Case("mg h after classic incr, decr and a failed add: h0 (none fetches)",
         [put(val="5"), setup("incr {k} 1\r\n", "6\r\n"), setup("decr {k} 1\r\n", "5\r\n"),
          setup("add {k} 0 0 1\r\nx\r\n", "NOT_STORED\r\n"), S("mg {k} h\r\n", "HD h0\r\n")]),
    Case("ms MA (append), MP (prepend); s is the new size",
         [put(), S("ms {k} 3 MA s\r\nzzz\r\n", "HD s5\r\n"), S("ms {k} 1 MP\r\n<\r\n", "HD\r\n"),
          S("mg {k} v\r\n", "VA 6\r\n<hizzz\r\n")], old="1.6.18 leaves out s"),
    Case("ms MA keeps the flags and TTL of the item",
         [put(flags=3, ttl=100), S("ms {k} 1 MA F9 T5\r\nz\r\n", "HD\r\n"),
          S("mg {k} f t v\r\n", "VA 3 f3 t(?:99..100)\r\nhiz\r\n")]),
    Case("ms MA, MP, MR on a miss: NS",
         [S("ms {k} 1 MA\r\nx\r\n", "NS\r\n"), S("ms {k} 1 MP\r\nx\r\n", "NS\r\n"),
          S("ms {k} 1 MR\r\nx\r\n", "NS\r\n"), S("mg {k} v\r\n", "EN\r\n")]),
    Case("ms MR, MS on a hit: HD", [put(), S("ms {k} 1 MR\r\nR\r\n", "HD\r\n"),
                                    S("ms {k} 1 MS\r\nS\r\n", "HD\r\n"),
                                    S("mg {k} v\r\n", "VA 1\r\nS\r\n")]),
    Case("ms MA N: append vivifies a miss with N's TTL",
         [S("ms {k} 3 MA N30\r\nabc\r\n", "HD\r\n"),
          S("mg {k} v t\r\n", "VA 3 t(?:29..30)\r\nabc\r\n")], old="1.6.18 does not vivify"),
    Case("ms MP N T: N's TTL, not T's",
         [S("ms {k} 3 MP N30 T5\r\nabc\r\n", "HD\r\n"),
          S("mg {k} v t\r\n", "VA 3 t(?:29..30)\r\nabc\r\n")], old="1.6.18 does not vivify"),
    Case("ms MA T without N on a miss: NS", [S("ms {k} 3 MA T5\r\nabc\r\n", "NS\r\n")]),
    Case("ms invalid mode: error, data swallowed",
         [S("ms {k} 1 MX\r\nX\r\n", "CLIENT_ERROR invalid mode for ms M token\r\n"),
          S("mg {k} v\r\n", "EN\r\n")]),
    Case("ms lowercase mode is invalid", [S("ms {k} 1 Ms\r\nS\r\n",
                                            "CLIENT_ERROR invalid mode for ms M token\r\n")]),
    Case("ms M without a mode", [S("ms {k} 1 M\r\nS\r\n",
                                   "CLIENT_ERROR invalid mode for ms M token\r\n")],
         old="1.6.18 answers incorrect length for M token"),
    Case("ms M token of two bytes: its first one counts (MEx is add)",
         [put(), S("ms {k} 1 MEx\r\nS\r\n", "NS\r\n"), S("ms {k2} 1 MEx\r\nS\r\n", "HD\r\n")],
         old="1.6.18 answers incorrect length for M token"),
    Case("ms C: HD on a match, EX on a mismatch, NF on a miss",
         [put(), cas_of(), S("ms {k} 2 C{cas} c\r\nho\r\n", "HD c(?cas2)\r\n"),
          S("ms {k} 2 C{cas}\r\nxx\r\n", "EX\r\n"), S("ms {k3} 2 C{cas}\r\nxx\r\n", "NF\r\n"),
          gets_is(val="ho", var="cas2")]),
    Case("ms q does not hide EX or NF",
         [put(), cas_of(), S("ms {k} 2 q C{cas+1}\r\nxx\r\n", "EX\r\n"),
          S("ms {k3} 2 q C{cas}\r\nxx\r\n", "NF\r\n")]),
    Case("ms MA with a mismatching C: EX", [put(), cas_of(),
                                            S("ms {k} 1 MA C{cas+1}\r\nz\r\n", "EX\r\n")]),
    Case("ms MA with the item's C: appended", [put(), cas_of(),
                                               S("ms {k} 1 MA C{cas}\r\nz\r\n", "HD\r\n"),
                                               S("mg {k} v\r\n", "VA 3\r\nhiz\r\n")]),
    Case("ms ME with C: add ignores the CAS", [put(), S("ms {k} 2 ME C123\r\nxx\r\n", "NS\r\n"),
                                               S("ms {k2} 2 ME C123\r\nxx\r\n", "HD\r\n")]),
    Case("ms MR with C: a CAS replace (EX on a mismatch, NF on a miss, HD on a match)",
         [put(), cas_of(), S("ms {k} 2 MR C{cas+1}\r\nxx\r\n", "EX\r\n"),
          S("ms {k2} 2 MR C{cas}\r\nxx\r\n", "NF\r\n"),
          S("ms {k} 2 MR C{cas}\r\nyy\r\n", "HD\r\n"), S("mg {k} v\r\n", "VA 2\r\nyy\r\n")]),
    Case("ms E: the stored item's CAS",
         [S("ms {k} 2 E12345 c\r\nhi\r\n", "HD c12345\r\n"), S("mg {k} c\r\n", "HD c12345\r\n"),
          S("ms {k} 2 C12345 E12399 c\r\nho\r\n", "HD c12399\r\n")], old="1.6.18 has no ms E"),
    Case("ms I with an older CAS: stored stale (X W, then Z X)",
         [put(), put(), cas_of(), S("ms {k} 2 I C{cas-1}\r\nst\r\n", "HD\r\n"),
          S("mg {k} v\r\n", "VA 2 X W\r\nst\r\n"), S("mg {k} v\r\n", "VA 2 Z X\r\nst\r\n")]),
    Case("ms I with the item's CAS: a plain CAS store",
         [put(), cas_of(), S("ms {k} 2 I C{cas}\r\nst\r\n", "HD\r\n"),
          S("mg {k} v\r\n", "VA 2\r\nst\r\n")]),
    Case("ms I with a newer CAS: EX", [put(), cas_of(),
                                       S("ms {k} 2 I C{cas+1}\r\nst\r\n", "EX\r\n")]),
    Case("ms I without C: a plain set", [put(), S("ms {k} 2 I\r\nzz\r\n", "HD\r\n"),
                                         S("mg {k} v\r\n", "VA 2\r\nzz\r\n")]),
    Case("ms I with an older CAS keeps the win token of a stale item",
         [put(), put(), cas_of(), S("md {k} I\r\n", "HD\r\n"), S("mg {k}\r\n", "HD X W\r\n"),
          S("ms {k} 2 I C{cas}\r\nst\r\n", "HD\r\n"), S("mg {k} v\r\n", "VA 2 Z X\r\nst\r\n")]),
    Case("ms b: a base64 key, k echoes it with b",
         [S("ms {bk} 2 b k c\r\nhi\r\n", "HD k{bk} b c(?*)\r\n")]),
    Case("ms with a bare LF after the line", [S("ms {k} 2\nhi\r\n", "HD\r\n"),
                                              S("mg {k} v\r\n", "VA 2\r\nhi\r\n")]),
    Case("ms md ma quiet pipeline ended by mn: only the errors and NF",
         [put("{k3}", "7"),
          S("ms {k} 1 q\r\na\r\nms {k2} 1 q\r\nb\r\nmd {k} q\r\nma {k3} q\r\nma {k2} q\r\n"
            "md {k} q\r\nmn\r\n",
            "CLIENT_ERROR cannot increment or decrement non-numeric value\r\nNF\r\nMN\r\n"),
          S("mg {k3} v\r\n", "VA 1\r\n8\r\n"), S("mg {k2} v\r\n", "VA 1\r\nb\r\n")]),
    Case("ms unknown flag with a parseable length: error, data swallowed",
         [S("ms {k} 5 j\r\nhello\r\n", INVAL + CRLF), S("mg {k} v\r\n", "EN\r\n")]),
    Case("ms duplicate flag: data swallowed", [S("ms {k} 2 T1 T2\r\nhi\r\n", DUP + CRLF),
                                               S("mg {k} v\r\n", "EN\r\n")]),
    Case("ms O of 33 bytes: data swallowed", [S("ms {k} 2 %s\r\nhi\r\n" % O32, OPAQ + CRLF),
                                              S("mg {k} v\r\n", "EN\r\n")]),
    Case("ms F not a number: data swallowed", [S("ms {k} 2 Fabc\r\nhi\r\n", BADFMT + CRLF)]),
    Case("ms F beyond 32 bits: data swallowed", [S("ms {k} 2 F4294967296\r\nhi\r\n",
                                                   BADFMT + CRLF), S("mg {k} v\r\n", "EN\r\n")],
         old="1.6.18 stores it"),
    Case("ms T not a number: data swallowed", [S("ms {k} 2 Tabc\r\nhi\r\n", BADTOK + CRLF)]),
    Case("ms C not a number: data swallowed", [S("ms {k} 2 C1a\r\nhi\r\n", BADTOK + CRLF)]),
    Case("ms key of 251 bytes: data swallowed", [S("ms {long} 2\r\nhi\r\n", BADFMT + CRLF)],
         old="1.6.18 does not swallow the data"),
    Case("ms b with a key that is not base64: data swallowed",
         [S("ms !!!! 2 b\r\nhi\r\n", "CLIENT_ERROR error decoding key\r\n")]),
    Case("ms 19 flags: too many, data swallowed",
         [S("ms {k} 2 c f h k l O P L q s t u v T1 R1 N1 E1 C1 I\r\nhi\r\n", TOOMANY + CRLF)],
         old="1.6.18 words it differently and does not swallow the data"),
    Case("ms length not a number: not swallowed (the data is a command)",
         [S("ms {k} abc\r\nhi\r\n", BADFMT + "\r\nERROR\r\n")]),
    Case("ms without a length", err("ms {k}\r\n", BADFMT)),
    Case("ms negative length", err("ms {k} -1\r\n", BADFMT)),
    Case("ms without a key", err("ms\r\n", BADFMT), old="1.6.18 answers ERROR"),
    Case("ms flag token starting with punctuation: the line is rejected, not swallowed",
         [S("ms {k} 2 !\r\nhi\r\n", BADFMT + "\r\nERROR\r\n")],
         old="1.6.18 answers invalid flag and swallows the data"),
    Case("ms bad data chunk: the bytes after the block are read as a command",
         [S("ms {k} 2\r\nhiXYmn\r\n", "CLIENT_ERROR bad data chunk\r\nMN\r\n"),
          S("mg {k} v\r\n", "EN\r\n")]),
    Case("ms bad data chunk: the CRLF left over is an empty command",
         [S("ms {k} 2\r\nabcd\r\n", "CLIENT_ERROR bad data chunk\r\n" + BADFMT + CRLF)],
         old="1.6.18 answers ERROR to the empty line"),
    Case("ms of a value over the item size limit: SERVER_ERROR, swallowed, the old value gone",
         [put(), S("ms {k} 2000000\r\n" + "x" * 2000000 + "\r\n",
                   "SERVER_ERROR object too large for cache\r\n"), S("mg {k} v\r\n", "EN\r\n")],
         modes=["whole"], timeout=10.0),

    # ------------------------------------------------------------ md
    Case("md miss: NF; O and k echoed; q does not hide NF",
         [S("md {k}\r\n", "NF\r\n"), S("md {k} O1 k\r\n", "NF O1 k{k}\r\n"),
          S("md {k} q\r\n", "NF\r\n")]),
    Case("md hit: HD, the key is gone", [put(), S("md {k}\r\n", "HD\r\n"),
                                         S("mg {k} v\r\n", "EN\r\n")]),
    Case("md q hides HD", [put(), S("md {k} q\r\n", ""), S("mg {k} v\r\n", "EN\r\n")]),
    Case("md k O in request order", [put(), S("md {k} k O1\r\n", "HD k{k} O1\r\n")]),
    Case("md C: EX on a mismatch (q does not hide it), HD on a match",
         [put(), cas_of(), S("md {k} C{cas+1}\r\n", "EX\r\n"), S("md {k} q C{cas+1}\r\n", "EX\r\n"),
          S("md {k} C{cas}\r\n", "HD\r\n"), S("mg {k} v\r\n", "EN\r\n")]),
    Case("md I T: stale with a new TTL; X W once, then Z X",
         [put(), S("md {k} I T30\r\n", "HD\r\n"),
          S("mg {k} t v\r\n", "VA 2 t(?:29..30) X W\r\nhi\r\n"),
          S("mg {k} v\r\n", "VA 2 Z X\r\nhi\r\n")]),
    Case("md I bumps the CAS", [put(), cas_of(), S("md {k} I C{cas}\r\n", "HD\r\n"),
                                S("md {k} I C{cas}\r\n", "EX\r\n")]),
    Case("md I q: HD hidden", [put(), S("md {k} I q\r\n", ""), S("mg {k} v\r\n", "VA 2 X W\r\nhi\r\n")]),
    Case("md I again: the token is handed out again",
         [put(), S("md {k} I\r\n", "HD\r\n"), S("mg {k}\r\n", "HD X W\r\n"),
          S("md {k} I\r\n", "HD\r\n"), S("mg {k}\r\n", "HD X W\r\n"), S("mg {k}\r\n", "HD Z X\r\n")]),
    Case("md T without I: a plain delete", [put(ttl=100), S("md {k} T5\r\n", "HD\r\n"),
                                            S("mg {k} v\r\n", "EN\r\n")]),
    Case("md I T0: stale without a TTL", [put(ttl=100), S("md {k} I T0\r\n", "HD\r\n"),
                                          S("mg {k} t\r\n", "HD t-1 X W\r\n")]),
    Case("md I E: the new CAS", [put(), S("md {k} I E777\r\n", "HD\r\n"),
                                 S("mg {k} c\r\n", "HD c777 X W\r\n")],
         old="1.6.18 has no md E"),
    Case("md x: the value emptied, the item kept with flags 0 and no TTL, CAS kept",
         [put(flags=3, ttl=100), cas_of(flags=3), S("md {k} x\r\n", "HD\r\n"),
          S("mg {k} v f t c\r\n", "VA 0 f0 t-1 c{cas}\r\n\r\n")], old="1.6.18 has no md x"),
    Case("md x I E: a stale empty item",
         [put(ttl=100), S("md {k} x I E4242\r\n", "HD\r\n"),
          S("mg {k} v f t c\r\n", "VA 0 f0 t-1 c4242 X W\r\n\r\n")], old="1.6.18 has no md x"),
    Case("md x on a miss: NF", [S("md {k} x\r\n", "NF\r\n")], old="1.6.18 has no md x"),
    Case("md x with a mismatching C: EX, the value kept",
         [put(), cas_of(), S("md {k} x C{cas+1}\r\n", "EX\r\n"), S("mg {k} v\r\n", "VA 2\r\nhi\r\n")],
         old="1.6.18 has no md x"),
    Case("md b: k echoes the base64 key with b",
         [S("ms {bk} 2 b\r\nhi\r\n", "HD\r\n"), S("md {bk} b k O9\r\n", "HD k{bk} b O9\r\n"),
          S("md {bk2} b k\r\n", "NF k{bk2} b\r\n")]),
    Case("md unknown flag", err("md {k} j\r\n", INVAL), old="1.6.18 answers invalid or duplicate flag"),
    Case("md duplicate flag", err("md {k} q q\r\n", DUP), old="1.6.18 answers invalid or duplicate flag"),
    Case("md O of 33 bytes", err("md {k} %s\r\n" % O32, OPAQ)),
    Case("md C not a number", err("md {k} Cx\r\n", BADTOK), old="1.6.18 answers invalid or duplicate flag"),
    Case("md without a key", err("md\r\n", BADFMT), old="1.6.18 answers ERROR"),
    Case("md key of 251 bytes", err("md {long}\r\n", BADFMT)),
    Case("md 18 flags (20 tokens) is accepted: EX k O echoed",
         [put(), cas_of(), S("md {k} c f h k l O P L q s t u v T1 R1 N1 E1 C{cas+1}\r\n",
                             "EX k{k} O\r\n"), S("mg {k} v\r\n", "VA 2\r\nhi\r\n")],
         old="1.6.18 counts 20 tokens as too many"),
    Case("md 19 flags: too many", err("md {k} c f h k l O P L q s t u v T1 R1 N1 E1 C1 x\r\n",
                                      TOOMANY), old="1.6.18 words it differently"),

    # ------------------------------------------------------------ ma
    Case("ma miss: NF; O and k echoed; q does not hide NF",
         [S("ma {k}\r\n", "NF\r\n"), S("ma {k} O1 k\r\n", "NF O1 k{k}\r\n"),
          S("ma {k} q\r\n", "NF\r\n")]),
    Case("ma incr by 1: HD; v returns the new value", [put(val="5"), S("ma {k}\r\n", "HD\r\n"),
                                                       S("ma {k} v\r\n", "VA 1\r\n7\r\n"),
                                                       S("mg {k} v\r\n", "VA 1\r\n7\r\n")]),
    Case("ma D: delta", [put(val="5"), S("ma {k} D10 v\r\n", "VA 2\r\n15\r\n"),
                         S("mg {k} v\r\n", "VA 2\r\n15\r\n")]),
    Case("ma modes MD M- M+ MI; decr stops at 0",
         [put(val="20"), S("ma {k} MD D3 v\r\n", "VA 2\r\n17\r\n"),
          S("ma {k} M- D100 v\r\n", "VA 1\r\n0\r\n"), S("ma {k} M+ v\r\n", "VA 1\r\n1\r\n"),
          S("ma {k} MI D10 v\r\n", "VA 2\r\n11\r\n")]),
    Case("ma incr wraps at 2^64", [put(val="18446744073709551615"),
                                   S("ma {k} v\r\n", "VA 1\r\n0\r\n")]),
    Case("ma D of 2^64-1", [put(val="0"), S("ma {k} D18446744073709551615 v\r\n",
                                            "VA 20\r\n18446744073709551615\r\n")]),
    Case("ma q: HD hidden", [put(val="5"), S("ma {k} q\r\n", ""), S("ma {k} v\r\n", "VA 1\r\n7\r\n")]),
    Case("ma v c t k O in request order; c is the item's CAS",
         [put(val="5"), S("ma {k} v c t k O7\r\n", "VA 1 c(?cas) t-1 k{k} O7\r\n6\r\n"),
          gets_is(val="6")]),
    Case("ma N J: a miss creates J with N's TTL (t after N)",
         [S("ma {k} N30 J13 v t\r\n", "VA 2 t(?:29..30)\r\n13\r\n"),
          S("ma {k} N30 J13 v\r\n", "VA 2\r\n14\r\n"), S("mg {k} t\r\n", "HD t(?:29..30)\r\n")]),
    Case("ma N: t before N shows -1", [S("ma {k} t N30 J13 v\r\n", "VA 2 t-1\r\n13\r\n")]),
    Case("ma N T: T after N sets the created item's TTL", [S("ma {k} N30 T100 t v\r\n",
                                                             "VA 1 t(?:99..100)\r\n0\r\n")]),
    Case("ma N q: the created value hidden too", [S("ma {k} N30 J4 q v\r\n", ""),
                                                  S("mg {k} v\r\n", "VA 1\r\n4\r\n")],
         old="1.6.18 answers HD"),
    Case("ma J without N: NF", [S("ma {k} J13 v\r\n", "NF\r\n")]),
    Case("ma N without J: 0", [S("ma {k} N0 v\r\n", "VA 1\r\n0\r\n"),
                               S("mg {k} t v\r\n", "VA 1 t-1\r\n0\r\n")]),
    Case("ma N E: the created item's CAS", [S("ma {k} N0 v c E999\r\n", "VA 1 c999\r\n0\r\n")],
         old="1.6.18 has no ma E"),
    Case("ma E on a hit: the new CAS", [put(val="1"), S("ma {k} E31337 c\r\n", "HD c31337\r\n"),
                                        S("mg {k} c v\r\n", "VA 1 c31337\r\n2\r\n")],
         old="1.6.18 has no ma E"),
    Case("ma T: new TTL on success; t sees it after T, before T the old one",
         [put(val="1"), S("ma {k} T100 t v\r\n", "VA 1 t(?:99..100)\r\n2\r\n"),
          S("ma {k} t T200\r\n", "HD t(?:99..100)\r\n"), S("mg {k} t\r\n", "HD t(?:199..200)\r\n")]),
    Case("ma C: EX on a mismatch with O and k echoed, HD on a match",
         [put(val="1"), cas_of(val="1"), S("ma {k} C{cas+1} O1 k\r\n", "EX O1 k{k}\r\n"),
          S("ma {k} C{cas} c\r\n", "HD c(?cas2)\r\n"), gets_is(val="2", var="cas2")]),
    Case("ma does not mark the item fetched (me fetch=no, mg h0)",
         [put(val="5"), S("ma {k}\r\n", "HD\r\n"), S("ma {k} v\r\n", "VA 1\r\n7\r\n"),
          S("me {k}\r\n", "ME {k} exp=-1 la=(?:0..1) cas=(?*) fetch=no cls=(?*) size=(?*)\r\n"),
          S("mg {k} h\r\n", "HD h0\r\n"), S("mg {k} h\r\n", "HD h1\r\n")]),
    Case("ma N: the created item is not fetched", [S("ma {k} N30 v\r\n", "VA 1\r\n0\r\n"),
                                                   S("mg {k} h\r\n", "HD h0\r\n")]),
    Case("ma on a value that is not a number",
         [put(val="abc"), S("ma {k}\r\n", "CLIENT_ERROR cannot increment or decrement "
                            "non-numeric value\r\n")]),
    Case("ma b: k echoes the base64 key with b",
         [S("ms {bk} 1 b\r\n1\r\n", "HD\r\n"), S("ma {bk} b k v\r\n", "VA 1 k{bk} b\r\n2\r\n"),
          S("ma {bk2} b k\r\n", "NF k{bk2} b\r\n")]),
    Case("ma invalid mode", err("ma {k} MX\r\n", "CLIENT_ERROR invalid mode for ma M token")),
    Case("ma M without a mode", err("ma {k} M\r\n", "CLIENT_ERROR invalid mode for ma M token"),
         old="1.6.18 answers invalid or duplicate flag"),
    Case("ma D not a number", err("ma {k} Dabc\r\n", MAERR)),
    Case("ma D beyond 64 bits", err("ma {k} D18446744073709551616 v\r\n", MAERR)),
    Case("ma J not a number", err("ma {k} Jx N1\r\n", MAERR)),
    Case("ma unknown flag", err("ma {k} j\r\n", MAERR)),
    Case("ma duplicate flag", err("ma {k} v v\r\n", MAERR)),
    Case("ma key of 251 bytes", err("ma {long}\r\n", MAERR), old="1.6.18 answers bad command line format"),
    Case("ma O of 33 bytes", [put(val="5"), S("ma {k} %s\r\n" % O32, OPAQ + CRLF)]),
    Case("ma 19 flags: too many", err("ma {k} c f h k l O P L q s t u v T1 R1 N1 E1 C1 x\r\n", MAERR),
         old="1.6.18 words it differently"),
    Case("ma without a key", err("ma\r\n", BADFMT), old="1.6.18 answers ERROR"),
]


# memcached's mg takes the item lock only for N R T h l: `mg KEY v c` on a
# stale item can hand W to two clients at once there (1.6.18 did, 2 of 50),
# so memcached's stale-while-revalidate herd asks for h too. ringcached
# promises one W without it.
MC_SWR_FLAGS = "v c h"


def check_herd(t, label, addr, key):
    """50 connections `mg <missing> N30 c v t` at once: exactly one W; the
    winner stores the new value once the others have sent theirs; each
    other reply is a Z (before that ms) or a hit of the new value without
    W or Z (after it)."""
    line = ("mg %s N30 c v t\r\n" % key).encode()
    stored = []

    def after_win(c, reply):
        c.send(("ms %s 5 T30\r\nfresh\r\n" % key).encode())
        stored.append(c.readline())
    rs = ml.herd([addr], line, 50, after_win)
    w = ml.won(rs)
    kinds = {"W": 0, "Z": 0, "fresh": 0, "other": []}
    for _, rl, data in rs:
        code, fl, _ = ml.parse_meta(rl)
        if "W" in fl:
            kinds["W"] += 1
            ok = code == "VA" and fl.get("size") == "0" and "Z" not in fl and data == b""
        elif "Z" in fl:
            kinds["Z"] += 1
            ok = code == "VA" and fl.get("size") == "0" and data == b""
        else:
            kinds["fresh"] += 1
            ok = code == "VA" and data == b"fresh" and "X" not in fl
        if not ok or not {"c", "t"} <= set(fl):
            kinds["other"].append((rl, data))
    c = lg.Conn(addr)
    try:
        c.send(line)
        late = ml.read_reply(c)
    finally:
        c.close()
    t.ok(len(w) == 1 and not kinds["other"] and stored == [b"HD"],
         "%s: herd of 50 on a missing key (mg N30 c v t): exactly one W (W %d, Z %d, hit "
         "after the winner's ms %d)" % (label, kinds["W"], kinds["Z"], kinds["fresh"]),
         "odd replies: %r\nwinner's ms: %r" % (kinds["other"][:5], stored))
    fl = ml.parse_meta(late[0])[1]
    t.ok(late[1] == b"fresh" and not {"W", "Z", "X"} & set(fl),
         "%s: after the herd, mg N30 sees the winner's value without W, Z or X" % label, late)


def check_swr(t, label, addr, key, flags="v c"):
    """Stale-while-revalidate: md I, then 50 connections `mg KEY <flags>` at
    once: one X W, 49 Z X, all with the old value; after an ms the mark is
    gone."""
    c = lg.Conn(addr)
    try:
        r0 = c.store("set", key, b"old")
        c.send(("md %s I\r\n" % key).encode())
        r1 = c.readline()
        rs = ml.herd([addr], ("mg %s %s\r\n" % (key, flags)).encode(), 50)
        xw = [r for r in rs if ml.parse_meta(r[1])[2][-2:] == ["X", "W"] and r[2] == b"old"]
        zx = [r for r in rs if ml.parse_meta(r[1])[2][-2:] == ["Z", "X"] and r[2] == b"old"]
        t.ok(r0 == b"STORED" and r1 == b"HD" and len(xw) == 1 and len(zx) == 49,
             "%s: md I, then 50 `mg %s` at once: one X W, 49 Z X (X W %d, Z X %d)"
             % (label, flags, len(xw), len(zx)),
             "set %r, md %r, replies %r" % (r0, r1, [r[1:] for r in rs
                                                      if r not in xw and r not in zx][:5]))
        c.send(("ms %s 3\r\nnew\r\n" % key).encode())
        r2 = c.readline()
        rs = ml.herd([addr], ("mg %s v c\r\n" % key).encode(), 10)
        clean = [r for r in rs if ml.parse_meta(r[1])[0] == "VA" and r[2] == b"new"
                 and not {"X", "W", "Z"} & set(ml.parse_meta(r[1])[1])]
        t.ok(r2 == b"HD" and len(clean) == 10,
             "%s: after ms the mark is gone: 10 mg see the new value without X, W or Z" % label,
             "ms %r, replies %r" % (r2, [r[1:] for r in rs if r not in clean][:5]))
    finally:
        c.close()


def run_server(t, label, addr, only_agreeing=False, swr_flags="v c"):
    n = len(CASES)
    passed = ml.run_table(t, label, addr, CASES, only_agreeing=only_agreeing)
    ran = n - (sum(1 for c in CASES if c.old) if only_agreeing else 0)
    t.diag("%s: %d of %d cases passed" % (label, passed, ran))
    check_herd(t, label, addr, "herd-%d" % os.getpid())
    check_swr(t, label, addr, "swr-%d" % os.getpid(), swr_flags)


def main():
    t = lg.Tap()
    lg.watchdog(170)
    try:
        node = Node(args=["-t", "4", "-m", "64"]).start()
        lg.track(node.proc)
        try:
            run_server(t, "ringcached", ("127.0.0.1", node.port))
        finally:
            node.stop()

        old = os.environ.get("RC_MEMCACHED", "/usr/bin/memcached")
        ver = ml.memcached_version(old)
        if ver is None:
            t.skip("memcached differential", "no memcached at %s" % old)
        else:
            mc = ml.Memcached(old).start()
            lg.track(mc.proc)
            try:
                run_server(t, "memcached " + ver, mc.addr, only_agreeing=ver != "1.6.45",
                           swr_flags=MC_SWR_FLAGS)
            finally:
                mc.stop()
        new = os.environ.get("RC_MEMCACHED_1645")
        if new:
            ver = ml.memcached_version(new)
            if ver != "1.6.45":
                t.ok(False, "RC_MEMCACHED_1645 is memcached 1.6.45", "%s: version %s" % (new, ver))
            else:
                mc = ml.Memcached(new).start()
                lg.track(mc.proc)
                try:
                    run_server(t, "memcached 1.6.45", mc.addr, swr_flags=MC_SWR_FLAGS)
                finally:
                    mc.stop()
    finally:
        lg.kill_all()
    t.done()


if __name__ == "__main__":
    main()
