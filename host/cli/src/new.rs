//! `sandgraph new` (being built: see issue 14).

use std::process::ExitCode;

use crate::exit::Failure;

/// `sandgraph new`
#[derive(clap::Args)]
pub struct NewArgs {}

pub async fn new(_args: NewArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph new` is not built yet"))
}
