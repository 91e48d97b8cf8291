-- forget: deletes request records whose calls have ended (core/forget.rs).
--
-- KEYS     request records ("leasehold_latch:{<key>}:…"), all in one slot
-- ARGV[i]  the newest request id whose call on KEYS[i] has ended
--
-- A record is deleted only while it holds that request or an older one:
-- the calls of one record (one owner of one lock) run one at a time under
-- the owner's turn, so every request older than one that has ended has
-- ended too (a later call that wrote no record leaves an older request's
-- record to delete); a newer request may have written it since, and its
-- call may still need it.
--
-- Reply: {"forgot", how many records were deleted} (the word tells this
-- reply from another command's, on a connection out of step).
--
-- Retry policy: harmless to run again (a record is deleted at most once,
-- and only while it holds a request whose call has ended).
local deleted = 0
for i, key in ipairs(KEYS) do
    local record = redis.call('get', key)
    local held = record and tonumber(string.match(record, '^(%d+)|'))
    if held and held <= tonumber(ARGV[i]) then
        redis.call('del', key)
        deleted = deleted + 1
    end
end
return {'forgot', deleted}
