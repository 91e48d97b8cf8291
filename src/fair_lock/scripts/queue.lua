-- queue: helpers every fair-lock script starts with (prepended at compile
-- time, see fair_lock/kind.rs). Redisson RFairLock layout, plus
-- leasehold's grant hash:
--
--   lock      hash  `name`: field -> hold count
--   queue     list  `redisson_lock_queue:{name}`: waiters' fields, FIFO
--   timeouts  zset  `redisson_lock_timeout:{name}`: field -> the epoch ms
--                   (client clock) after which the waiter counts as gone
--   grants    hash  `leasehold_grant:{name}`: `<field>` ->
--                   "<lease ms>:<nonce>:<alive until>[:c]" for each
--                   queued leasehold waiter (Java waiters have none;
--                   "<alive until>", epoch ms, is the liveness sign
--                   leasehold waiters refresh and Java ignores; ":c" or
--                   ":C": past it, the waiter's client keeps it alive,
--                   see `gone_at`), and
--                   `!granted` -> "<nonce>:<field>": the field
--                   a release granted the lock to and the nonce of that
--                   grant, until that owner's next script or until the
--                   field is gone
--   alive     string `leasehold_alive:{name}:<client uuid>` (a cluster)
--             or `leasehold_alive:<client uuid>`, with a TTL: set by a
--             leasehold client while it has waiters queued (`alive_key`)
--   channel   `redisson_lock__channel:{name}`; waiter `f` listens on
--             `<channel>:<f>` and is told `0` when it is its turn, or
--             `grant:<nonce>:<ms>` when it was made the holder

-- Scores in the timeouts zset follow Redisson's arithmetic, so both
-- libraries' waiters share one queue (REDISSON-WIRE.md §3.3): a Java
-- waiter's score is its predecessor's plus one Java thread wait, a Java
-- acquire moves every score one Java wait earlier, and a head whose score
-- passed is purged. JAVA_WAIT is that wait (Redisson's default
-- `fairLockWaitTimeout`, 5 minutes). A leasehold waiter at position c
-- (0: the head) keeps its score at alive + (c + 1) * JAVA_WAIT, `alive`
-- being now + leasehold's thread wait (5 s) at its last refresh: what a
-- Java waiter there would have, from a fresher start, so Java's shifts
-- never make a live leasehold waiter look dead, and a Java waiter queued
-- behind one inherits a full Java wait. Leasehold's own scripts purge a
-- leasehold head by its liveness sign instead (`deadline`): a dead
-- leasehold waiter holds up leasehold waiters for seconds.
local JAVA_WAIT = 300000

-- A waiter's grant entry: lease ms and nonce (digit strings, as
-- written), alive-until (a number) and its suffix: ':c' or ':C' when its
-- client keeps it alive (see `gone_at`), else ''; nil for a Java waiter,
-- alive nil for an entry without one.
local function entry_of(grants, field)
    local entry = redis.call('hget', grants, field)
    if not entry then
        return nil, nil, nil, ''
    end
    local lease, nonce, alive, kept = string.match(entry, '^(%d+):(%d+):?(%d*)(:?[cC]?)$')
    return lease, nonce, tonumber(alive), kept or ''
end

-- The key by which a leasehold client keeps its waiters alive, a key
-- with a TTL of one thread wait that the client sets again every 2 s
-- while it has waiters queued (fair_lock/alive.rs): for an entry marked
-- ':c', one per lock, `leasehold_alive:{name}:<client uuid>` (named from
-- the grants key: the lock's slot, for a cluster); for ':C', one for the
-- whole client, `leasehold_alive:<client uuid>` (a server that is not a
-- cluster). Not declared: the head's client is known only here.
local function alive_key(grants, client, kept)
    if kept == ':C' then
        return 'leasehold_alive:' .. client
    end
    return 'leasehold_alive' .. string.sub(grants, 16) .. ':' .. client
end

-- When queued waiter `field` counts as gone (nil: it has no timeout):
-- for a leasehold waiter (a grant entry with a liveness sign), that sign,
-- or, once it has passed, for a waiter whose client keeps it alive
-- (`kept`, see `entry_of`), the end of its client's alive key; for any
-- other, its score. A leasehold waiter's score is always later than its
-- sign (see above: it is written as alive + (c + 1) * JAVA_WAIT, and
-- each shift since, leasehold's or Java's, of at most one JAVA_WAIT, came
-- with the waiter moving up one place), so its score is not read.
-- `alive`: the liveness sign of its entry (see `entry_of`), nil if it has
-- none. The alive key is read only once the waiter's own sign has passed:
-- a handoff to a waiter that queued moments ago reads nothing more.
local function gone_at(timeouts, grants, field, alive, kept, now)
    if alive then
        if kept ~= '' and alive <= now then
            local client = string.match(field, '^(.*):')
            local left = client and redis.call('pttl', alive_key(grants, client, kept)) or -2
            if left > 0 then
                return now + left
            end
        end
        return alive
    end
    return tonumber(redis.call('zscore', timeouts, field))
end

local function deadline(timeouts, grants, field, now)
    local _, _, alive, kept = entry_of(grants, field)
    return gone_at(timeouts, grants, field, alive, kept, now)
end

-- A queued leasehold waiter shows it is alive: its liveness sign becomes
-- now + wait and its score alive + (position + 1) * JAVA_WAIT (see
-- above). False if it is not queued (purged, or granted the lock).
local function keep_alive(queue, timeouts, grants, field, now, wait)
    local pos = redis.call('lpos', queue, field)
    if not pos then
        return false
    end
    redis.call('zadd', timeouts, now + wait + (pos + 1) * JAVA_WAIT, field)
    local lease, nonce, _, kept = entry_of(grants, field)
    if lease then
        redis.call('hset', grants, field, lease .. ':' .. nonce .. ':' .. (now + wait) .. kept)
    end
    return true
end

-- A grant marker's field and nonce (false, nil if there is none).
local function marker_of(marker)
    if not marker then
        return false, nil
    end
    local nonce, field = string.match(marker, '^(%d+):(.+)$')
    return field or false, tonumber(nonce)
end

-- The grant marker: the field granted and the grant's nonce (false, nil
-- if there is none).
local function granted_to(grants)
    return marker_of(redis.call('hget', grants, '!granted'))
end

-- Drops the grant marker if its field no longer holds the lock, and every
-- waiter's grant entry once nobody is queued (entries of waiters a Java
-- script purged). `head`: the queue's head if the caller just read it
-- (false: the queue is empty), nil if unknown. Returns the marker left
-- (see `marker_of`), or false.
local function tidy(lock, queue, grants, head)
    local granted = redis.call('hget', grants, '!granted')
    local field = marker_of(granted)
    if granted and ((not field) or redis.call('hexists', lock, field) == 0) then
        redis.call('hdel', grants, '!granted')
        granted = false
    end
    local empty
    if head == nil then
        empty = redis.call('llen', queue) == 0
    else
        empty = not head
    end
    if empty and redis.call('hlen', grants) > (granted and 1 or 0) then
        redis.call('del', grants)
        if granted then
            redis.call('hset', grants, '!granted', granted)
        end
    end
    return granted
end

-- Drops gone waiters at the head of the queue (Redisson's "purge stale
-- head" prelude): a head whose deadline is <= now (its liveness sign, or
-- its score: see `gone_at`), and also a head with no timeout at all
-- (no script of either side leaves one; it could only block the queue
-- forever). Then tidies the grant hash. Returns the head left (false:
-- nobody is queued) and the grant marker left (false: none), which the
-- caller may use instead of reading them again (no script step between
-- changes them).
local function purge(lock, queue, timeouts, grants, now)
    local head
    while true do
        head = redis.call('lindex', queue, 0)
        if not head then
            break
        end
        local gone = deadline(timeouts, grants, head, now)
        if gone and gone > now then
            break
        end
        redis.call('lpop', queue)
        redis.call('zrem', timeouts, head)
        redis.call('hdel', grants, head)
    end
    return head, tidy(lock, queue, grants, head)
end

-- Where a shift moves a waiter's timeout `score` (see `shift`): one Java
-- wait earlier, but not earlier than now + `wait`, nor later than it was.
local function shifted(score, now, wait)
    return math.max(score - JAVA_WAIT, math.min(score, now + wait))
end

-- Adds `score` and `member` to `batch`, the arguments of a ZADD to
-- `timeouts` being gathered, and sends it once it holds 256 pairs (a few
-- hundred pairs a call). Returns the batch to go on with; `zadd_rest`
-- sends what is left.
local function zadd_batch(timeouts, batch, score, member)
    batch[#batch + 1] = score
    batch[#batch + 1] = member
    if #batch >= 512 then
        redis.call('zadd', timeouts, unpack(batch))
        return {}
    end
    return batch
end

local function zadd_rest(timeouts, batch)
    if #batch > 0 then
        redis.call('zadd', timeouts, unpack(batch))
    end
end

-- A waiter ahead of `fields` left the queue (by taking the lock, or by
-- giving up): their timeouts move one Java wait earlier, as Redisson's
-- acquire and acquireFailed do, but never to less than one leasehold
-- thread wait from now (a head that just moved up can show up before it
-- is purged). `only`: nil (every queued field), or a set of the fields
-- to move (field -> true).
local function shift(timeouts, now, wait, only)
    local rest = redis.call('zrange', timeouts, 0, -1, 'withscores')
    -- One ZADD for the lot (see `zadd_batch`): one command per handoff or
    -- leave, not one per queued waiter.
    local moves = {}
    for i = 1, #rest, 2 do
        local score = tonumber(rest[i + 1])
        local moved = shifted(score, now, wait)
        if moved ~= score and (not only or only[rest[i]]) then
            moves = zadd_batch(timeouts, moves, moved, rest[i])
        end
    end
    zadd_rest(timeouts, moves)
end

-- Waiter `head` took the lock (or was granted it): its timeout goes, and
-- every other moves as `shift` moves them. All timeouts are popped and the
-- others written back in one ZADD: two commands, whatever the queue's
-- length (ZREM, ZRANGE and ZADD otherwise). Returns how many are left
-- (0: nobody is queued; the list and the zset change together, in every
-- script of either side).
local function shift_out(timeouts, now, wait, head)
    local all = redis.call('zpopmin', timeouts, 2147483647)
    local back = {}
    local left = 0
    for i = 1, #all, 2 do
        if all[i] ~= head then
            local score = tonumber(all[i + 1])
            local moved = shifted(score, now, wait)
            if moved == score then
                -- As it was read (no float formatting on the way back).
                moved = all[i + 1]
            end
            back = zadd_batch(timeouts, back, moved, all[i])
            left = left + 1
        end
    end
    zadd_rest(timeouts, back)
    return left
end

-- Makes leasehold waiter `head` (popped from the queue already; `lease`
-- and `nonce` from its grant entry) the holder of the free lock: count 1,
-- TTL min(its lease, grant ms), its timeout gone and the others shifted
-- as its own acquire would, marked `!granted` (with the nonce; this
-- replaces any marker), and told `grant:<nonce>:<ttl>`. Returns as
-- `hand_over_next`.
local function grant(lock, timeouts, grants, channel, publish, now, wait, grant_ms, head, lease, nonce)
    local ms = math.max(1, math.min(tonumber(lease), grant_ms))
    redis.call('hset', lock, head, 1)
    redis.call('pexpire', lock, ms)
    if shift_out(timeouts, now, wait, head) == 0 then
        -- Nobody queued now: entries of waiters a Java script purged go
        -- (what `tidy` does; the marker is set anew just below).
        redis.call('del', grants)
    else
        redis.call('hdel', grants, head)
    end
    redis.call('hset', grants, '!granted', nonce .. ':' .. head)
    local received = redis.call(publish, channel .. ':' .. head, 'grant:' .. nonce .. ':' .. ms)
    return received, now + ms, 1, head, tonumber(nonce), ms
end

-- The lock is free: hands it to the first waiter still there, dropping
-- gone waiters at the head on the way (as `purge` does). Each head is
-- popped first and read after (popping it is needed in the common case,
-- a grant, and the pop reads it: one command fewer than LINDEX, then
-- LPOP). A leasehold head (it has a grant entry) is granted the lock
-- (`grant`). Any other head is pushed back where it was and told `0`
-- (Redisson's protocol). A grant marker goes either way (the lock is
-- free: whoever it names holds nothing), as does the whole grant hash
-- once nobody is queued. Returns how many connections received the
-- message (-1: nobody waits), the time to check again if nobody did (the
-- head's timeout, or the grant's end; -1: nobody waits) and 1 if granted;
-- when granted, also the head's field, the nonce and the grant's TTL.
-- `head`: the head the caller popped already (false: the queue was
-- empty), or nil to pop it here.
local function hand_over_next(lock, queue, timeouts, grants, channel, publish, now, wait, grant_ms, head)
    while true do
        if head == nil then
            head = redis.call('lpop', queue)
        end
        if not head then
            redis.call('del', grants)
            return -1, -1, 0
        end
        local lease, nonce, alive, kept = entry_of(grants, head)
        local gone = gone_at(timeouts, grants, head, alive, kept, now)
        if gone and gone > now then
            if lease then
                return grant(lock, timeouts, grants, channel, publish, now, wait, grant_ms,
                    head, lease, nonce)
            end
            redis.call('lpush', queue, head)
            redis.call('hdel', grants, '!granted')
            local received = redis.call(publish, channel .. ':' .. head, '0')
            return received, math.floor(gone), 0
        end
        redis.call('zrem', timeouts, head)
        if lease then
            redis.call('hdel', grants, head)
        end
        head = nil
    end
end
