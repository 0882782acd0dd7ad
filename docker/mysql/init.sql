-- The MySQL mirror's table (examples/pipelines/data_available_mysql.yaml), created when the
-- MySQL service starts with an empty data directory.
CREATE TABLE IF NOT EXISTS data_available (
  id VARCHAR(64) PRIMARY KEY,
  recipient VARCHAR(256),
  origin VARCHAR(64),
  message_type VARCHAR(256),
  weight INT,
  bundleable BOOL,
  batch_item_id VARCHAR(64)
);
