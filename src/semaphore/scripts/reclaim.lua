-- reclaim: prepended to the semaphore's scripts that take or count
-- permits. Permits whose expiry has passed go back to the free count, as
-- every Redisson permit-expirable script does first.
--
-- A permit's expiry is its score in the "{name}:timeout" zset: epoch ms by
-- the clock of the client that set it (Redisson's "never expires" permits
-- score 922337203685477, centuries away). `now` is the caller's clock.
-- When permits came back and the free count is positive, the new count is
-- published (Redisson's message: waiters may retry that many times).
local function reclaim(count_key, timeout_key, channel, now, publish)
    local expired = redis.call('zremrangebyscore', timeout_key, '-inf', now)
    if expired > 0 then
        local free = redis.call('incrby', count_key, expired)
        if free > 0 then
            redis.call(publish, channel, free)
        end
    end
end
