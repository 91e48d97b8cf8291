-- record prologue: makes a mutation idempotent by request id.
--
-- Prepended to every mutating script (see core/call.rs). The script's last
-- key is its request record: a string "<rid>|<reply>" recording the last request
-- this owner sent for this lock, kept for ARGV[#ARGV - 1] milliseconds.
-- ARGV[#ARGV] is the request id (rid), which only grows for one request record.
--
--   * rid equals the recorded one: a re-send of a call that already ran.
--     Its recorded reply is returned, with the rid negated (a replay tells
--     Redis as it was at the first run), and nothing changes.
--   * rid is older than the recorded one: a call that arrived after a newer
--     one of the same owner ran (e.g. delayed in a proxy). It never runs;
--     the reply is {rid, -1}.
--   * `read_record` false (a check before the record, core/script.rs,
--     proved this is the request's first run: see the lock's check.lua):
--     the record is not read, and the body runs.
--   * otherwise the body runs (the function `body` the script defines; it
--     returns an array of integers whose first is a status >= 0) and its
--     reply, with the rid put in front, is recorded and returned.
local record_key = KEYS[#KEYS]
local rid = ARGV[#ARGV]
if read_record then
    local recorded = redis.call('get', record_key)
    if recorded then
        local sep = string.find(recorded, '|', 1, true)
        local last = string.sub(recorded, 1, sep - 1)
        if last == rid then
            local replay = {}
            for n in string.gmatch(string.sub(recorded, sep + 1), '[^,]+') do
                replay[#replay + 1] = tonumber(n)
            end
            replay[1] = -replay[1]
            return replay
        end
        if tonumber(last) > tonumber(rid) then
            return {tonumber(rid), -1}
        end
    end
end
