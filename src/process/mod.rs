//! Running and ending OS processes: a program started in a process group of its own under a
//! supervisor that takes its whole tree down with the replica, the stop or kill a replica asks
//! of that supervisor, and the sweep that kills what is left of a tree whose supervisor is gone.
//! A run's command and an `exec:` notice both start this way, so neither owns it.

mod supervised;
mod supervisor;
mod tree;

pub(crate) use supervised::{
    Exit, KILL_WAIT, RUN_ID_VARIABLE, Supervised, end_unsupervised, spawn_supervised,
};
pub(crate) use supervisor::{end_tree, stop_tree};
