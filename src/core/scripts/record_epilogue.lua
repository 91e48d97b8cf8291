
-- record epilogue: run the body once, put the rid in front of its reply (so
-- the client can tell its own reply from any other) and record it (unless
-- a check before the record found its state enough to answer a copy:
-- `write_record` false, core/script.rs).
local reply = body()
local rid = ARGV[#ARGV]
table.insert(reply, 1, tonumber(rid))
if write_record then
    redis.call('set', KEYS[#KEYS], rid .. '|' .. table.concat(reply, ','), 'px', ARGV[#ARGV - 1])
end
return reply
