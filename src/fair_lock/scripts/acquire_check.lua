-- acquire_check: the acquire's check before the request record
-- (core/script.rs, "A check before the record"), as the plain lock's
-- (lock/scripts/acquire_check.lua), with the queue in mind.
--
-- KEYS[1]  the lock hash
-- KEYS[4]  the grants (hash)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field
-- ARGV[5]  1: wait in the queue if busy; 0: one try, never queued
-- ARGV[7]  the hold count the client counts for this owner before this
--          acquire, or -1: read and write the record as always (a call of
--          the client has an unknown outcome: core/conn.rs,
--          `records_optional`)
--
-- * Someone else holds the lock, and this is a single try: it changes
--   nothing, so it neither reads nor writes the record: `early` is its
--   reply, {0, pttl}.
-- * Someone else holds the lock, the caller waits and the client counts
--   no hold: the body queues the caller (or, queued already, refreshes
--   its place) and records its grant entry, with no record: a copy of
--   this request that runs again does the same to the same effect (the
--   entry's nonce is this request id either way), or, the lock granted
--   to the caller meanwhile, finds the case below.
-- * Redis holds what the client counts (no key for 0, the field at that
--   count otherwise): this is the request's first run, and taking the
--   hold moves Redis to what the client will count from the reply. No
--   record is read or written.
-- * The field holds one more than the client counts: a copy of this
--   request already ran, or, the client counting none, a release
--   granted the caller the lock and the client has not adopted it (the
--   message was lost or is not read yet). Either way the caller holds
--   `count` now: answered from the state, as a replay ({1, count}, the
--   key's TTL raised to the lease, never lowered), and a grant marker
--   naming the caller goes (the grant is taken up).
-- * Any other count (the client's count is out of date): the record is
--   read and written as always.
--
-- Hands the body `found.pttl` (the lock's PTTL, -2: no key) and
-- `found.count` (the caller's field, false: none or no key).
local pttl = redis.call('pttl', KEYS[1])
local expected = tonumber(ARGV[7])
local count = false
if pttl == -2 then
    if expected == 0 then
        read_record, write_record = false, false
    end
else
    count = redis.call('hget', KEYS[1], ARGV[2])
    if not count then
        if ARGV[5] ~= '1' then
            early = {0, pttl}
        elseif expected == 0 then
            read_record, write_record = false, false
        end
    elseif expected > 0 and tonumber(count) == expected then
        read_record, write_record = false, false
    elseif expected >= 0 and tonumber(count) == expected + 1 then
        if expected == 0 and granted_to(KEYS[4]) == ARGV[2] then
            redis.call('hdel', KEYS[4], '!granted')
        end
        if pttl < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        early, early_replay = {1, tonumber(count)}, true
    end
end
found.pttl, found.count = pttl, count
