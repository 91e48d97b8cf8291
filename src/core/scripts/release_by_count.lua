-- release by count: the part of a release's check (before the request
-- record, core/script.rs "A check before the record") that every kind
-- whose release gives back counted holds of one field shares. The kind's
-- check reads the field and sets `found.count` (its value, or false),
-- `found.expected` (the hold count the client expects the field to have,
-- or 0: read and write the record as always) and `found.given` (the holds
-- this release gives back); this sets `early`, `early_replay`,
-- `read_record` and `write_record` (core/script.rs, SHARED). The replies are the engine's (core/kind.rs,
-- `Kind::release_reply`):
--
-- * The field holds `expected`: the request's first run. Nothing is read
--   or written beside the lock.
-- * The field holds `expected - given`: a copy of this request already ran
--   and left holds. {1, left}, as a replay. Nothing changes.
-- * The field is gone where the release would free the lock: {3}, "gone"
--   (a copy already freed it, or the hold was lost before). Nothing
--   changes.
-- * The field is gone where holds would be left: {0}, not held. Nothing
--   changes.
-- * Any other count: the record is read and written as always.
local count, expected, given = found.count, found.expected, found.given
if expected ~= 0 then
    local left = expected - given
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
