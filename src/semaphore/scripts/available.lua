-- available: the free permit count, after expired permits are reclaimed
-- (reclaim.lua is prepended), as Redisson's availablePermits.
--
-- KEYS[1]  the free permit count
-- KEYS[2]  the taken permits: zset "{name}:timeout"
-- KEYS[3]  the channel "redisson_sc:{name}"
-- ARGV[1]  now, epoch ms (the client's clock)
-- ARGV[2]  "publish" or "spublish"
--
-- Reply: the free count (0 when the semaphore is not set; may be negative
-- after negative add_permits).
--
-- Retry policy: idempotent (a second reclaim finds nothing to reclaim);
-- not retried.
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return tonumber(redis.call('get', KEYS[1]) or '0')
