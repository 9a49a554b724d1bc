module ringcache.dev/ringcache

go 1.19
