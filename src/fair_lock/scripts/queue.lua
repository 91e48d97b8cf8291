-- queue: helpers every fair-lock script starts with (prepended at compile
-- time, see fair_lock/kind.rs). Redisson RFairLock layout, plus
-- leasehold's grant hash:
--
--   lock      hash  `name`: field -> hold count
--   queue     list  `redisson_lock_queue:{name}`: waiters' fields, FIFO
--   timeouts  zset  `redisson_lock_timeout:{name}`: field -> the epoch ms
--                   (client clock) after which the waiter counts as gone
--   grants    hash  `leasehold_grant:{name}`: `<field>` -> "<lease ms>:<nonce>"
--                   for each queued leasehold waiter (Java waiters have
--                   none), and `!granted` -> "<nonce>:<field>": the field
--                   a release granted the lock to and the nonce of that
--                   grant, until that owner's next script or until the
--                   field is gone
--   channel   `redisson_lock__channel:{name}`; waiter `f` listens on
--             `<channel>:<f>` and is told `0` when it is its turn, or
--             `grant:<nonce>:<ms>` when it was made the holder

-- The grant marker: the field granted and the grant's nonce (false, nil
-- if there is none).
local function granted_to(grants)
    local marker = redis.call('hget', grants, '!granted')
    if not marker then
        return false, nil
    end
    local nonce, field = string.match(marker, '^(%d+):(.+)$')
    return field or false, tonumber(nonce)
end

-- Drops the grant marker if its field no longer holds the lock, and every
-- waiter's grant entry once nobody is queued (entries of waiters a Java
-- script purged).
local function tidy(lock, queue, grants)
    local granted = redis.call('hget', grants, '!granted')
    local field = granted_to(grants)
    if granted and ((not field) or redis.call('hexists', lock, field) == 0) then
        redis.call('hdel', grants, '!granted')
        granted = false
    end
    if redis.call('llen', queue) == 0 and redis.call('hlen', grants) > (granted and 1 or 0) then
        redis.call('del', grants)
        if granted then
            redis.call('hset', grants, '!granted', granted)
        end
    end
end

-- Drops gone waiters at the head of the queue (Redisson's "purge stale
-- head" prelude): a head whose timeout is <= now, and also a head with no
-- timeout at all (no script of either side leaves one; it could only
-- block the queue forever). Then tidies the grant hash.
local function purge(lock, queue, timeouts, grants, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            break
        end
        local score = redis.call('zscore', timeouts, head)
        if score and tonumber(score) > now then
            break
        end
        redis.call('lpop', queue)
        redis.call('zrem', timeouts, head)
        redis.call('hdel', grants, head)
    end
    tidy(lock, queue, grants)
end

-- A waiter left the queue by taking the lock: every other timeout moves
-- one thread wait earlier, as Redisson's acquire does, but never to less
-- than one thread wait from now (leasehold's waiters keep their own
-- timeouts fresh; this keeps a waiter that just became head from being
-- purged before it can show up).
local function shift(timeouts, now, wait)
    local rest = redis.call('zrange', timeouts, 0, -1, 'withscores')
    for i = 1, #rest, 2 do
        local score = tonumber(rest[i + 1])
        local moved = math.max(score - wait, math.min(score, now + wait))
        if moved ~= score then
            redis.call('zadd', timeouts, moved, rest[i])
        end
    end
end

-- The lock is free: hands it to the head waiter, if any. A leasehold head
-- (it has a grant entry) is made the holder at once: count 1, TTL
-- min(its lease, grant ms), popped as its own acquire would, marked
-- `!granted` (with the nonce), and told `grant:<nonce>:<ttl>`. Any other head is told `0`
-- (Redisson's protocol). Returns how many connections received the
-- message (-1: nobody waits), the time to check again if nobody did (the
-- head's timeout, or the grant's end; -1: nobody waits) and 1 if granted;
-- when granted, also the head's field, the nonce and the grant's TTL.
local function hand_over(lock, queue, timeouts, grants, channel, publish, now, wait, grant_ms)
    local head = redis.call('lindex', queue, 0)
    if not head then
        return -1, -1, 0
    end
    local entry = redis.call('hget', grants, head)
    local wanted, nonce
    if entry then
        wanted, nonce = string.match(entry, '^(%d+):(%d+)$')
    end
    if wanted then
        local ms = math.max(1, math.min(tonumber(wanted), grant_ms))
        redis.call('hset', lock, head, 1)
        redis.call('pexpire', lock, ms)
        redis.call('lpop', queue)
        redis.call('zrem', timeouts, head)
        shift(timeouts, now, wait)
        redis.call('hdel', grants, head)
        tidy(lock, queue, grants)
        redis.call('hset', grants, '!granted', nonce .. ':' .. head)
        local received = redis.call(publish, channel .. ':' .. head, 'grant:' .. nonce .. ':' .. ms)
        return received, now + ms, 1, head, tonumber(nonce), ms
    end
    local received = redis.call(publish, channel .. ':' .. head, '0')
    local score = redis.call('zscore', timeouts, head)
    return received, math.floor(tonumber(score) or -1), 0
end
