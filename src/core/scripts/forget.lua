-- forget: deletes request records whose calls have ended (core/forget.rs).
--
-- KEYS     request records ("leasehold_latch:{<key>}:…"), all in one slot
-- ARGV[i]  the request id whose reply has arrived, for KEYS[i]
--
-- A record is deleted only while it still holds that request: a newer
-- request of the same owner may have written it since, and its call may
-- still need it.
--
-- Reply: {"forgot", how many records were deleted} (the word tells this
-- reply from another command's, on a connection out of step).
--
-- Retry policy: harmless to run again (a record is deleted at most once,
-- and only while it holds a request whose call has ended).
local deleted = 0
for i, key in ipairs(KEYS) do
    local record = redis.call('get', key)
    local rid = ARGV[i] .. '|'
    if record and string.sub(record, 1, #rid) == rid then
        redis.call('del', key)
        deleted = deleted + 1
    end
end
return {'forgot', deleted}
