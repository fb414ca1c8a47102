//! The archive's outbox handed out in parts: bounded by bytes as well as by records.

use std::time::Duration;

use redcron::engine::exporter::PART_BYTES;
use redcron::store::ArchiveTake;
use redis::Commands;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::store::connect;

/// Thirty outcomes of 1 MB payloads make parts of at most 16 MiB of records, not one part of
/// 30 MB, and every record is handed out once.
#[tokio::test]
async fn a_part_closes_at_its_byte_bound_as_well_as_its_record_count() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let payload = vec![b'x'; 1_000_000];
    let mut connection = server.connection();
    for n in 0..30 {
        let _: String = connection
            .xadd(
                keys().archive(),
                "*",
                &[
                    ("run", format!("r{n}").into_bytes()),
                    ("payload", payload.clone()),
                ],
            )
            .expect("XADD");
    }
    let mut sizes = Vec::new();
    let mut handed = 0;
    while handed < 30 {
        let take = store
            .take_archive_part(
                "e1",
                1_000,
                Duration::ZERO,
                Duration::from_secs(60),
                true,
                PART_BYTES,
            )
            .await
            .expect("take");
        let ArchiveTake::Part(part) = take else {
            panic!("{take:?} with {handed} of 30 handed out");
        };
        let bytes: usize = part
            .records
            .iter()
            .flat_map(|record| record.fields.iter())
            .map(|(name, value)| name.len() + value.len())
            .sum();
        assert!(bytes <= PART_BYTES, "a part of {bytes} bytes");
        handed += part.records.len();
        sizes.push(part.records.len());
        store.ack_archived(&part).await.expect("ack");
    }
    assert_eq!(handed, 30);
    assert_eq!(sizes, vec![16, 14], "parts of {sizes:?} records");
}
