/*
 * cas_clock: the clock part of every CAS the node mints (a hybrid logical
 * clock: milliseconds since 2024 above a 22-bit counter), shared by the
 * store (which mints) and the compact engine's record codec (which keeps a
 * record's last access as a distance from its CAS's second).
 */
#ifndef SERVER_CAS_CLOCK_H
#define SERVER_CAS_CLOCK_H

#include <stdint.h>

/* The CAS clock counts milliseconds from 2024-01-01T00:00:00Z (Unix ms
 * 1704067200000), shifted above a 22-bit counter: CAS values stay below
 * 2^63 (clients that hold a CAS in a signed 64-bit integer) until 2093. */
#define STORE_CAS_EPOCH_MS     INT64_C(1704067200000)
#define STORE_CAS_LOGICAL_BITS 22

/* The CAS clock at Unix time unix_ms: the least CAS minted from then on
 * (0 before the clock's epoch). */
static inline uint64_t
store_cas_clock(int64_t unix_ms)
{
    return unix_ms > STORE_CAS_EPOCH_MS
               ? (uint64_t)(unix_ms - STORE_CAS_EPOCH_MS) << STORE_CAS_LOGICAL_BITS
               : 0;
}

/* The Unix second a CAS's clock part names (the clock's epoch for a CAS
 * below it, such as a test's small numbers), within the u32 of a store
 * time. */
static inline uint32_t
store_cas_unix_s(uint64_t cas)
{
    uint64_t s = (cas >> STORE_CAS_LOGICAL_BITS) / 1000 + (uint64_t)(STORE_CAS_EPOCH_MS / 1000);

    return s < UINT32_MAX ? (uint32_t)s : UINT32_MAX - 1;
}

#endif /* SERVER_CAS_CLOCK_H */
