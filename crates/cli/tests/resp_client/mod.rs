//! A RESP connection with just enough of the protocol for the multi-process
//! tests' INCR, GET and MULTI/EXEC (shared by the ownership and commit
//! tests; not every test uses every method).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct Client {
    reader: BufReader<TcpStream>,
    pub stream: TcpStream,
}

impl Client {
    /// Connects (within 2 s) with `timeout` for every answer.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(timeout))?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            stream,
        })
    }

    /// One line of an answer, without its CRLF.
    pub fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line.trim_end().to_owned())
    }

    /// Sends one command; its answer's first line.
    pub fn send(&mut self, args: &[&str]) -> std::io::Result<String> {
        self.stream.write_all(&frame(args))?;
        self.line()
    }

    /// `Ok(Some(n))`: acknowledged; `Ok(None)`: an error answer.
    pub fn incr(&mut self, key: &str) -> std::io::Result<Option<i64>> {
        let reply = self.send(&["INCR", key])?;
        Ok(reply
            .strip_prefix(':')
            .map(|n| n.parse().expect("an integer")))
    }

    /// The key's integer value (`None`: no such key); an error answer (a
    /// read refused while its reactor moved: it changed nothing) is `Err`.
    pub fn get(&mut self, key: &str) -> std::io::Result<Option<i64>> {
        let head = self.send(&["GET", key])?;
        if head == "$-1" {
            return Ok(None);
        }
        if head.starts_with('-') {
            return Err(std::io::Error::other(head));
        }
        assert!(head.starts_with('$'), "GET {key}: {head}");
        Ok(Some(self.line()?.parse().expect("an integer")))
    }
}

impl Client {
    /// `MGET` of integer keys (`None`: no such key); an error answer is
    /// `Err`.
    pub fn mget(&mut self, keys: &[&str]) -> std::io::Result<Vec<Option<i64>>> {
        let mut args = vec!["MGET"];
        args.extend_from_slice(keys);
        let head = self.send(&args)?;
        if head.starts_with('-') {
            return Err(std::io::Error::other(head));
        }
        assert_eq!(head, format!("*{}", keys.len()), "MGET {keys:?}");
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            let head = self.line()?;
            if head == "$-1" {
                values.push(None);
                continue;
            }
            assert!(head.starts_with('$'), "MGET {key}: {head}");
            values.push(Some(self.line()?.parse().expect("an integer")));
        }
        Ok(values)
    }
}

/// A command as a RESP array of bulk strings.
pub fn frame(args: &[&str]) -> Vec<u8> {
    let mut frame = format!("*{}\r\n", args.len());
    for arg in args {
        frame.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    frame.into_bytes()
}
