-- release_check: the release's check before the request record
-- (core/script.rs, "A check before the record"), as the plain lock's
-- (lock/scripts/release_check.lua).
--
-- KEYS[1]  the lock hash
-- ARGV[2]  owner field
-- ARGV[8]  the hold count the client expects the field to have before
--          this release, or 0 to read the record as always (a call of
--          this client has an unknown outcome: core/conn.rs,
--          `records_optional`)
--
-- The field holding exactly that count proves this is the request's
-- first run: a copy that ran before lowered it (or deleted it), and only
-- this owner's own requests, one at a time, change it (a release grants
-- the lock only to a queued waiter, and an owner that holds the lock is
-- not queued: its re-entry drops any entry it had). Then the record is
-- not read (it is written: a copy of this release finds the field
-- lowered or gone, and only the record tells "released" from "lost
-- before"). Any other count, or none, reads the record: a copy that
-- already ran replays its reply.
--
-- Sets `count` (the field's value, or false) for the body.
local count = redis.call('hget', KEYS[1], ARGV[2])
local early, early_replay = nil, false
local read_record = not (ARGV[8] ~= '0' and count == ARGV[8])
local write_record = true
