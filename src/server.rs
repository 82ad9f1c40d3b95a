//! `convapi serve`: wires the process together and takes it apart again.
//!
//! Start order: the store (read pool), the writer, the checkpointer, the pipeline, then the HTTP
//! front serving [`api::Api`]. Stop order is the reverse, so that every request already received
//! is answered and every write it queued is committed before the writer ends, and the last
//! checkpoint runs once nothing else writes. This is the only module that knows all the parts;
//! `http/` knows none of them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::api::collect::{PixelGuard, PixelPolicy};
use crate::api::{Api, App};
use crate::checkpoint::Checkpointer;
use crate::http;
use crate::metrics::Metrics;
use crate::store;
use crate::writer::{Writer, WriterConfig};

/// What `convapi serve` runs with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub db: PathBuf,
    /// Listen address, request threads and connection limits.
    pub http: http::Config,
    pub writer: WriterConfig,
    /// Run the background pipeline (tests switch it off to drive it by hand).
    pub pipeline: bool,
    /// Rate limits and bounds of the public pixel endpoint.
    pub pixel: PixelPolicy,
    /// A bearer token `/metrics` asks for; `None`: open to whoever reaches the listener.
    pub metrics_token: Option<String>,
}

/// A running server: its address, and a way to stop it.
pub struct Running {
    pub addr: SocketAddr,
    http: http::Server,
    app: Arc<App>,
    writer_thread: JoinHandle<()>,
    pipeline_thread: Option<JoinHandle<()>>,
    checkpointer: Checkpointer,
}

/// Opens the database, starts the writer, the checkpointer, the pipeline and the HTTP front.
pub fn start(config: &ServeConfig) -> Result<Running, String> {
    let threads = config.http.threads.max(1);
    let pool = store::open_pool(&config.db, threads as u32 + 2).map_err(|e| e.to_string())?;
    let (writer, writer_thread) =
        Writer::start(&config.db, config.writer.clone()).map_err(|e| e.to_string())?;
    let checkpointer =
        Checkpointer::start(&config.db, writer.catch_up()).map_err(|e| e.to_string())?;
    let metrics = Metrics::default();
    let (pipeline, pipeline_thread) = if config.pipeline {
        let (w, t) = crate::pipeline::spawn(&config.db, metrics.clone(), writer.clone())
            .map_err(|e| e.to_string())?;
        (w, Some(t))
    } else {
        (crate::pipeline::Waker::disabled(), None)
    };
    let app = Arc::new(App {
        pool,
        writer,
        metrics: metrics.clone(),
        key_touched: Mutex::new(HashMap::new()),
        pipeline,
        pixel: PixelGuard::new(config.pixel.clone()),
        metrics_token: config.metrics_token.clone(),
    });
    let http = http::serve(&config.http, Arc::new(Api(app.clone())), metrics)?;
    Ok(Running {
        addr: http.addr,
        http,
        app,
        writer_thread,
        pipeline_thread,
        checkpointer,
    })
}

impl Running {
    /// Stops accepting, finishes the requests already received, commits what the writer holds,
    /// stops the pipeline, and returns once all of it is done.
    pub fn shutdown(self) {
        let Running {
            http,
            app,
            writer_thread,
            pipeline_thread,
            checkpointer,
            ..
        } = self;
        // Every request thread has ended when this returns, and with them their `App` handles.
        http.stop();
        app.pipeline.stop();
        if let Some(t) = pipeline_thread {
            let _ = t.join();
        }
        // The writer thread ends once the last handle (inside `app`) is gone and its queue is empty.
        drop(app);
        let _ = writer_thread.join();
        // Last: one more checkpoint once nothing else writes.
        drop(checkpointer);
    }
}
