//! What makes the busiest paths fast, beside the table modules: concurrent gets and
//! creates that wait together go to Postgres together (`batch`, `lookups`, `creates`), and a
//! cleanly finished connection goes straight to the next request (`hot`). The SQL they run
//! is the table modules'; this folder only decides when and on which connection.

pub mod batch;
pub mod creates;
pub mod hot;
pub mod lookups;
