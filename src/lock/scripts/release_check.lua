-- release_check: the release's check before the request record
-- (core/script.rs, "A check before the record").
--
-- KEYS[1]  the lock hash
-- ARGV[2]  owner field
-- ARGV[3]  how many holds to give back
-- ARGV[5]  the hold count the client expects the field to have before
--          this release, or 0 to read and write the record as always (a
--          call of this client has an unknown outcome: core/conn.rs,
--          `records_optional`)
--
-- Only this owner's own requests, one at a time under its turn, change
-- its field, and a copy of a request can only run while its call is in
-- progress (core/fence.rs). So, with the client's count known:
--
-- * The field holds exactly that count: this is the request's first run.
--   Nothing is read or written beside the lock: a copy of it finds the
--   field lowered or gone.
-- * The field holds that count less the holds given back: a copy of this
--   request already ran. Answered from the state, as a replay: {1, left}.
-- * The field is gone, and the release would have left none: {3}, "gone".
--   Either a copy of this request already freed the lock, or the hold was
--   lost before the request ran; Redis keeps nothing that tells the two
--   apart. The client reads it as freed if the request may have been sent
--   more than once (core/call.rs, `Reply::may_be_copy`), as not held
--   otherwise.
-- * The field is gone and holds would have been left: {0}, not held (lost
--   before, or after a copy ran: either way none is held).
-- * Any other count (the client's count is out of date): the record is
--   read and written as always.
--
-- Sets `count` (the field's value, or false) for the body.
local count = redis.call('hget', KEYS[1], ARGV[2])
local early, early_replay = nil, false
local read_record, write_record = true, true
local expected = tonumber(ARGV[5])
if expected ~= 0 then
    local left = expected - tonumber(ARGV[3])
    if not count then
        if left > 0 then
            early = {0}
        else
            early = {3}
        end
    elseif tonumber(count) == expected then
        read_record, write_record = false, false
    elseif left > 0 and tonumber(count) == left then
        early, early_replay = {1, left}, true
    end
end
