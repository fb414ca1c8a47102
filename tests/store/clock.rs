//! Redis's clock as the store reads it.

use std::time::Duration;

use crate::util::redis_server::RedisServer;
use crate::util::store::connect;

#[tokio::test]
async fn a_reading_of_redis_clock_maps_its_times_to_the_latest_local_instant_they_can_be() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let reading = store.clock().await.expect("TIME");
    assert!(reading.round_trip() < Duration::from_secs(1));
    let now_ms = store.now_ms().await.expect("TIME");
    // A time on Redis's clock maps to the reading's answer plus how far it lies ahead: Redis
    // read its clock before answering, so the mapping can only be late, never early.
    let ahead = reading.latest_instant_of(now_ms + 5_000);
    assert!(ahead >= reading.received() + Duration::from_millis(4_900));
    assert!(ahead <= reading.received() + Duration::from_millis(5_100));
    // A time already past maps to no later than the answer: start at once.
    assert_eq!(
        reading.latest_instant_of(now_ms - 60_000),
        reading.received()
    );

    let frozen = store
        .with_frozen_clock(1_000)
        .clock()
        .await
        .expect("frozen");
    assert_eq!(
        frozen.latest_instant_of(1_250),
        frozen.received() + Duration::from_millis(250)
    );
}
