/* being written */
#ifndef CLIENT_RINGCACHE_H
#define CLIENT_RINGCACHE_H
#endif
