-- queue: helpers every fair-lock script starts with (prepended at compile
-- time, see fair_lock/mod.rs). Redisson RFairLock layout:
--
--   queue     list  `redisson_lock_queue:{name}`: waiters' fields, FIFO
--   timeouts  zset  `redisson_lock_timeout:{name}`: field -> the epoch ms
--                   (client clock) after which the waiter counts as gone
--   channel   `redisson_lock__channel:{name}`; waiter `f` listens on
--             `<channel>:<f>` and is told `0` when it is its turn

-- Drops gone waiters at the head of the queue (Redisson's "purge stale
-- head" prelude): a head whose timeout is <= now, and also a head with no
-- timeout at all (no script of either side leaves one; it could only
-- block the queue forever).
local function purge(queue, timeouts, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return
        end
        local score = redis.call('zscore', timeouts, head)
        if score and tonumber(score) > now then
            return
        end
        redis.call('lpop', queue)
        redis.call('zrem', timeouts, head)
    end
end

-- Tells the head waiter, if any, that it is its turn: `0` on its own
-- channel. Returns how many connections received it (-1: nobody waits) and
-- the head's timeout (-1: nobody waits).
local function notify_head(queue, timeouts, channel, publish)
    local head = redis.call('lindex', queue, 0)
    if not head then
        return -1, -1
    end
    local received = redis.call(publish, channel .. ':' .. head, '0')
    local score = redis.call('zscore', timeouts, head)
    return received, math.floor(tonumber(score) or -1)
end
