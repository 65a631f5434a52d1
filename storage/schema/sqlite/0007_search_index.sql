-- Workspace search indexes shared by every worker (keel.protocol.search_index): per workspace a version, bumped
-- by every write in its transaction, and a generation, drawn when the row is created, the documents, each with
-- the version and place (seq) of the write that stored it, read in that order, and the content hash of each
-- file indexed (NULL: indexed without its vectors).
CREATE TABLE search_indexes (
    workspace_id TEXT PRIMARY KEY,
    generation   TEXT NOT NULL,
    version      INTEGER NOT NULL
);
CREATE TABLE search_index_documents (
    workspace_id TEXT NOT NULL,
    id           TEXT NOT NULL,
    source       TEXT NOT NULL,
    version      INTEGER NOT NULL,
    seq          INTEGER NOT NULL,
    content      TEXT NOT NULL,
    metadata     TEXT NOT NULL,
    PRIMARY KEY (workspace_id, id)
);
CREATE INDEX search_index_documents_by_write ON search_index_documents (workspace_id, version, seq);
CREATE INDEX search_index_documents_by_source ON search_index_documents (workspace_id, source);
CREATE TABLE search_index_files (
    workspace_id TEXT NOT NULL,
    path         TEXT NOT NULL,
    content_hash TEXT,
    PRIMARY KEY (workspace_id, path)
) WITHOUT ROWID;
