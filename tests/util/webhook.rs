//! A webhook receiver on loopback: a small HTTP/1.1 server that records every request it is
//! sent and answers each with the next status of a script (200 once the script runs out), or
//! holds a request without answering.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Header names in lower case, with their values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// The status it was answered with; `None` while it is held, or when the sender went away
    /// before the answer.
    pub answered: Option<u16>,
}

impl Received {
    /// The value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

/// What the receiver answers: a status, or `None` to hold the request without answering for
/// as long as the sender waits.
type Script = Vec<Option<u16>>;

/// The receiver; it stops when dropped (its thread ends with the test process).
pub struct WebhookReceiver {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<Script>>,
}

impl WebhookReceiver {
    /// Listens on a free loopback port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the webhook receiver");
        let port = listener.local_addr().expect("its address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(Vec::new()));
        let (shared_received, shared_script) = (received.clone(), script.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (received, script) = (shared_received.clone(), shared_script.clone());
                std::thread::spawn(move || serve(stream, &received, &script));
            }
        });
        Self {
            port,
            received,
            script,
        }
    }

    /// Its address, for a job's `notify`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Answers the next requests with these, in order (`None`: hold it unanswered).
    pub fn answer(&self, statuses: &[Option<u16>]) {
        self.script
            .lock()
            .expect("the script")
            .extend(statuses.iter().copied());
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("the requests").clone()
    }
}

fn serve(stream: TcpStream, received: &Mutex<Vec<Received>>, script: &Mutex<Script>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_lowercase(), value.trim().to_owned()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let status = {
        let mut script = script.lock().expect("the script");
        if script.is_empty() {
            Some(200)
        } else {
            script.remove(0)
        }
    };
    let index = {
        let mut received = received.lock().expect("the requests");
        received.push(Received {
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
            answered: None,
        });
        received.len() - 1
    };
    let Some(status) = status else {
        // Held: wait until the sender goes away.
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest);
        return;
    };
    let mut stream = stream;
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let answer =
        format!("HTTP/1.1 {status} Status\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    if stream.write_all(answer.as_bytes()).is_ok() {
        received.lock().expect("the requests")[index].answered = Some(status);
    }
}
