-- Migration 27: the index on a visitor's sessions ends in the session's id, the tie-break of the
-- order in which a conversion's session is chosen (`started_at DESC, id DESC`, the latest session
-- in the window), so that the latest session is the first entry of a backward index scan, with
-- no sort. The export reads its sessions in this order too.

DROP INDEX sessions_visitor;
CREATE INDEX sessions_visitor ON sessions (site_id, visitor_id, started_at, id);
