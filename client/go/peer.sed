# gomemcache's memcache_test.go run against the ringcache Go package
# (tests/it/test_go_peer.py): only how the client is constructed changes.
# 1. The test's package imports ringcache's API into its namespace, so its
#    New, Client, Item and Err* are ringcache's.
/^import (/a\
	. "ringcache.dev/ringcache"
# 2. The server is a node of the cluster the driver started, not
#    localhost:11211 (New(testServer) seeds the client with it).
s/^const testServer = "localhost:11211"$/var testServer = os.Getenv("RC_GO_PEER_SERVER")/
# 3. TestUnixSocket constructs its client on a memcached unix socket:
#    libringcache connects over TCP only.
s/^\(\t*\)testWithClient(t, New(sock))$/\1t.Skip("libringcache connects over TCP only: no client on a unix socket")/
