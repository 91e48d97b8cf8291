-- forget_node: forget.lua for the records one Redis Cluster node serves,
-- in one call, whatever their hash slots. No key is
-- declared: the call is sent to the node itself (core/script.rs).
--
-- ARGV  record 1, request id 1, record 2, request id 2, ... (a record is
--       deleted while it holds that request or an older one: forget.lua)
--
-- A record this node does not serve (its slot moved away: redis.pcall
-- catches the refusal) is left to its TTL.
--
-- Reply: {"forgot", how many records were deleted} (the word tells this
-- reply from another command's, on a connection out of step).
--
-- Retry policy: harmless to run again (see forget.lua).
local deleted = 0
for i = 1, #ARGV, 2 do
    local record = redis.pcall('get', ARGV[i])
    local held = type(record) == 'string' and tonumber(string.match(record, '^(%d+)|'))
    if held and held <= tonumber(ARGV[i + 1]) then
        redis.pcall('del', ARGV[i])
        deleted = deleted + 1
    end
end
return {'forgot', deleted}
