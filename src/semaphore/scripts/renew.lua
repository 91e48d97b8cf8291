-- renew: push the expiry of many permits forward in one call (the
-- watchdog's batch), or check that they are still held.
--
-- KEYS[i]       the zset "{name}:timeout" of the i-th permit's semaphore
-- ARGV[1]       the batch's nonce, echoed first in the reply
-- ARGV[2]       TTL in milliseconds; 0 only checks the permits
-- ARGV[2i+1]    the i-th permit id, 16 raw bytes
-- ARGV[2i+2]    now, epoch ms (the client's clock)
--
-- Reply: {nonce, the indices i whose permit is gone}: missing from the
-- zset, or expired (score <= now). An expired permit is never renewed: any client
-- may already have counted it back (the reclaim step), so renewing it
-- would hand out one permit twice. It is left for the reclaim step. A
-- live permit's expiry is raised to now + TTL + 1 (rounded up: `now` is
-- floored to the millisecond), never lowered.
--
-- Retry policy: idempotent; the watchdog does not retry within a cycle.
local ttl = tonumber(ARGV[2])
for i = 1, #KEYS do
    local id = ARGV[2 * i + 1]
    local now = tonumber(ARGV[2 * i + 2])
    local score = redis.call('zscore', KEYS[i], id)
    if not score or tonumber(score) <= now then
        lost(i)
    elseif ttl > 0 and tonumber(score) < now + ttl + 1 then
        redis.call('zadd', KEYS[i], 'xx', now + ttl + 1, id)
    end
end
return verdict()
