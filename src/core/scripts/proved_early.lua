-- proved early reply: record_early.lua for the twin sent without the
-- request record (core/script.rs, "Sent without the record"). The check
-- set `early` for a try it can answer from what it read (a lock someone
-- else holds, or a copy of a request that already ran: `early_replay`).
-- It is answered at once with the request id appended as the string it
-- was sent as ("-" in front for a replay), as proved_epilogue.lua does.
if early then
    local rid = ARGV[#ARGV]
    if early_replay then
        rid = '-' .. rid
    end
    early[#early + 1] = rid
    return early
end
