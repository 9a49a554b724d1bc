"""gomemcache's own tests (memcache_test.go of Debian's
golang-github-bradfitz-gomemcache-dev) against the ringcache Go package on
a 3-node R=2 ringcached cluster: make builds them into
client/go/peer/memcache.test with only the construction changed
(client/go/peer.sed: the package's names come from ringcache, the server
is a node of this cluster, the unix-socket test skips: libringcache
speaks TCP only; and setup() reads its flush_all's reply before the test
writes, see docs/go.md). TAP: one line per gomemcache test, then the counts.
Skipped only when the Go package or gomemcache's source is missing."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goext  # noqa: E402
import loadgen  # noqa: E402

BIN = os.path.join("client", "go", "peer", "memcache.test")


def scenario(t):
    cl, ok = loadgen.start_cluster(t, ["a", "b", "c"], replicas=2)
    try:
        if not ok:
            return
        counts = goext.run(t, BIN, ".", {"RC_GO_PEER_SERVER": cl.nodes["a"].addr_s},
                           label="gomemcache")
        t.diag("gomemcache memcache_test.go on ringcache: %d passed, %d failed, %d skipped"
               % (counts["PASS"], counts["FAIL"], counts["SKIP"]))
    finally:
        loadgen.close_cluster(t, cl)


def main():
    why = goext.not_built(os.path.join("client", "go", "ringcache.test"))
    if not why and goext.not_built(BIN):
        why = ("gomemcache's source was not found at configure "
               "(apt-get install golang-github-bradfitz-gomemcache-dev, then reconfigure)")
    if why:
        t = loadgen.Tap()
        t.skip("gomemcache's tests on ringcache", why)
        t.done()
    loadgen.tap_main(scenario, seconds=200)


if __name__ == "__main__":
    main()
