//! Rebuilds the crate when a migration is added or changed: `schema.rs` embeds the migration
//! directories at compile time, and cargo does not watch them by itself.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
    println!("cargo:rerun-if-changed=../../migrations-citus");
}
