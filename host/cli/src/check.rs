//! `sandgraph check` (being built: see issue 14).

use std::process::ExitCode;

use crate::exit::Failure;

/// `sandgraph check`
#[derive(clap::Args)]
pub struct CheckArgs {}

pub async fn check(_args: CheckArgs) -> Result<ExitCode, Failure> {
    Err(Failure::internal("`sandgraph check` is not built yet"))
}
