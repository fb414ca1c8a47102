//! Each Lua script on its own, against a real Redis, by room as `src/store/` has them: given this
//! state and this call, expect that state. Time-based decisions use a frozen clock
//! (`Store::with_frozen_clock`).

mod archiving;
mod claiming;
mod clock;
mod connection;
mod contract;
mod damage;
mod enqueueing;
mod finishing;
mod leadership;
mod planning;
mod promotion;
