-- An export's consistency point is a position in one server's history: a standby past that
-- position holds exactly the rows the point holds only while it replays the WAL of the
-- primary that holds the point. A standby whose upstream was promoted while that primary
-- still ran (a split brain; the promoted server need not be registered) follows a history of
-- its own past the fork, and parts read there mixed its rows into the export. The point now
-- records the timeline of the primary it was taken on; a part on a standby checks that the
-- standby replays that timeline. NULL for points taken before this column: not checked.
ALTER TABLE deckhand.export ADD COLUMN consistency_timeline int;
