//! `redcron web`: the web console and its HTTP API on one address, and `redcron web hash`, which
//! prints what the auth file keeps of a secret.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use tokio::signal::unix::{SignalKind, signal};

use super::redact::without_password;
use super::{CliError, RedisArgs, block_on};
use crate::client::Client;
use crate::shutdown::Shutdown;
use crate::web::{Auth, WebState, check_base_path, hash_password, hash_token, router, serve};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct WebArgs {
    #[command(subcommand)]
    command: Option<WebCommand>,
    /// The address to serve on. Any but a loopback address needs --auth-file: the console
    /// can pause, trigger and purge.
    #[arg(
        long,
        env = "REDCRON_WEB_LISTEN",
        value_name = "ADDR:PORT",
        default_value = "127.0.0.1:8080"
    )]
    listen: SocketAddr,
    /// The path the console is served under, as a reverse proxy forwards it (`/redcron`):
    /// every link and form is relative to it.
    #[arg(
        long,
        env = "REDCRON_WEB_BASE_PATH",
        value_name = "PATH",
        default_value = ""
    )]
    base_path: String,
    /// Believe a reverse proxy's X-Forwarded-Prefix for the console's links: only behind a
    /// proxy that sets it, since any client could otherwise point the links elsewhere. A
    /// proxy needs --auth-file too: without one, only a Host naming this machine is answered.
    #[arg(long, env = "REDCRON_WEB_TRUST_PROXY")]
    trust_proxy: bool,
    /// Refuse every action (pause, resume, trigger, enqueue, retry, purge) on the server side:
    /// the console only shows.
    #[arg(long, env = "REDCRON_WEB_READ_ONLY")]
    read_only: bool,
    /// The bearer tokens and users allowed in, each a viewer or an operator (TOML; see
    /// docs/web.md).
    #[arg(long, env = "REDCRON_WEB_AUTH_FILE", value_name = "FILE")]
    auth_file: Option<PathBuf>,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(Debug, Subcommand)]
enum WebCommand {
    /// Print the hash of a secret read from standard input, for the auth file: a user's
    /// password_hash (Argon2), or with --token a token's sha256.
    Hash(HashArgs),
}

#[derive(Debug, Args)]
struct HashArgs {
    /// The secret is a bearer token: print its SHA-256 (a token is long and random, so a fast
    /// hash keeps it safe; a password needs Argon2's slowness).
    #[arg(long)]
    token: bool,
}

pub(super) fn execute(args: &WebArgs, out: &mut impl Write) -> Result<(), CliError> {
    if let Some(WebCommand::Hash(hash)) = &args.command {
        return print_hash(hash, out);
    }
    let auth = match &args.auth_file {
        Some(path) => Auth::load(path).map_err(|error| CliError::Argument(error.to_string()))?,
        None => Auth::default(),
    };
    if !args.listen.ip().is_loopback() && !auth.is_configured() {
        return Err(CliError::Argument(format!(
            "--listen {}: not a loopback address, and no authentication is configured; anyone \
             who reaches it could pause, trigger and purge. Give --auth-file with at least one \
             token or user (see docs/web.md), or listen on 127.0.0.1",
            args.listen
        )));
    }
    if !args.base_path.is_empty() {
        check_base_path(&args.base_path).map_err(|error| CliError::Argument(error.to_string()))?;
    }
    let namespace = args.redis.namespace()?.to_owned();
    block_on(async {
        let store = args.redis.connect().await?;
        let state = WebState::new(Client::from_store(store), &namespace, auth, args.read_only)
            .under(&args.base_path, args.trust_proxy)
            .listening_on(args.listen.ip());
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .map_err(CliError::io(format!("listening on {}", args.listen)))?;
        let address = listener
            .local_addr()
            .map_err(CliError::io("reading the listening address"))?;
        let url = args.redis.redis.as_deref().map(without_password);
        tracing::info!(
            "serving the console of namespace {namespace} on http://{address}{}/ (Redis {}{})",
            args.base_path,
            url.as_deref().unwrap_or("embedded"),
            if args.read_only { ", read-only" } else { "" },
        );
        let shutdown = Shutdown::new();
        tokio::spawn(stop_on_signal(shutdown.clone()));
        serve(listener, router(state), &args.base_path, shutdown)
            .await
            .map_err(|error| CliError::Argument(error.to_string()))
    })
}

/// SIGTERM or SIGINT: stop taking connections and finish the requests under way.
async fn stop_on_signal(shutdown: Shutdown) {
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers: stop the console with SIGKILL");
        return;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    shutdown.cancel();
}

/// Prints the hash of the secret on standard input (one line; its line break is not part of it).
fn print_hash(args: &HashArgs, out: &mut impl Write) -> Result<(), CliError> {
    let mut secret = String::new();
    std::io::stdin()
        .take(64 * 1024)
        .read_to_string(&mut secret)
        .map_err(CliError::io("reading the secret from standard input"))?;
    let secret = secret.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        return Err(CliError::Argument(
            "no secret on standard input: pipe it in (`printf %s \"$SECRET\" | redcron web hash`)"
                .to_owned(),
        ));
    }
    let hash = if args.token {
        hash_token(secret)
    } else {
        hash_password(secret).map_err(|error| CliError::Argument(format!("hashing: {error}")))?
    };
    writeln!(out, "{hash}").map_err(CliError::io("writing the hash"))
}
