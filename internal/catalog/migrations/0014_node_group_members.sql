-- A group's members in name order: a claim locks the members of the groups it found runnable
-- group tasks for (lockNodesSQL), through this index, without reading the other nodes.
CREATE INDEX node_group_member_idx ON deckhand.node (node_group, name);
