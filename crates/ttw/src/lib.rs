//! `ttw`: the operator's tool for `ttw-durable` task stores.
//!
//! The `ttw` binary is [`main`]; install it with `cargo install --path
//! crates/ttw`. See the README's "Operating it", or `ttw --help`.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod cli;
mod commands;
mod demo;
mod error;
mod moving;
mod output;
mod parse;
mod queues;
mod server;
mod store;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::{fail, Failure, Result};
use crate::store::open;

/// Runs the tool on this process's arguments: parses them (a usage error is
/// clap's message and exit 2), runs the command on a runtime of its own,
/// and answers how the process should exit (an error is one line on
/// standard error, `ttw: error: ...`, and exit 1).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("ttw: error: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message)) => {
            eprintln!("ttw: error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    if let Command::Demo(args) = &cli.command {
        return demo::demo(args).await;
    }
    if let Command::Server(args) = &cli.command {
        return match &args.config {
            Some(config) => server::server(config, args.check).await,
            None => {
                // A reader that stops early (`| head`) is not an error.
                use std::io::Write;
                match writeln!(std::io::stdout(), "{}", server::openapi()) {
                    Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
                        fail(format!("cannot write the document: {err}"))
                    }
                    _ => Ok(()),
                }
            }
        };
    }
    let Some(database) = cli.database.as_deref() else {
        return fail("no database: pass --database PATH_OR_URL or set DATABASE_URL");
    };
    let creating = matches!(cli.command, Command::Migrate);
    let store = open(
        database,
        cli.schema.as_deref(),
        creating,
        ttw_durable::Commits::default(),
    )
    .await?;
    let json = cli.json;
    match cli.command {
        Command::Migrate => commands::migrate(&store, json).await,
        Command::Status => commands::status(&store, json).await,
        Command::List(args) => commands::list(&store, args, json).await,
        Command::Show(target) => commands::show(&store, target, json).await,
        Command::Schedule(args) => commands::schedule(&store, args, json).await,
        Command::Cancel(target) => commands::cancel(&store, target, json).await,
        Command::Reschedule(args) => commands::reschedule(&store, args, json).await,
        Command::Redrive(args) => commands::redrive(&store, args, json).await,
        Command::Schedules => commands::schedules(&store, json).await,
        Command::Export(args) => {
            let mut out = moving::output(args.output.as_deref())?;
            moving::export(&store, &mut out).await
        }
        Command::Import(args) => moving::import(&store, &args.file).await,
        Command::Queue(command) => queues::queue(&store, command, json).await,
        // Handled above, before a database is opened.
        Command::Server(_) => fail("ttw server opens the database its configuration names"),
        Command::Demo(_) => fail("ttw demo makes a store of its own"),
    }
}
