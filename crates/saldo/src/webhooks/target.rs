//! Who may be sent to: the URL rules (absolute `http`/`https`, a host, no userinfo, at most
//! [`super::MAX_URL_BYTES`]) and the address rule: a target that resolves to a loopback,
//! private, link-local, unspecified (or other non-public: multicast, shared, documentation)
//! address is refused, at registration and again at every connection (the service resolves the
//! name itself and connects only to addresses checked here, so a name that changes its answer
//! between the check and the connection, DNS rebinding, gains nothing), unless the operator
//! allowed private targets. Also what of a URL may be logged ([`redacted`]: never its query).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use url::{Host, Url};

use crate::domain::InputError;
use crate::error::Error;

/// Longest a name lookup may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most addresses of one name looked at.
pub const MAX_ADDRESSES: usize = 32;

/// Parses and checks a webhook URL (not its addresses).
pub fn parse_url(raw: &str) -> Result<Url, InputError> {
    let invalid = |why: &str| InputError::WebhookUrlInvalid(why.to_owned());
    if raw.is_empty() || raw.len() > super::MAX_URL_BYTES {
        return Err(invalid(&format!(
            "must be 1..={} bytes",
            super::MAX_URL_BYTES
        )));
    }
    let url = Url::parse(raw).map_err(|e| invalid(&format!("not an absolute URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("only http and https URLs are accepted"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("userinfo (user:password@) is not accepted"));
    }
    if url.host().is_none() {
        return Err(invalid("a host is needed"));
    }
    if url.fragment().is_some() {
        return Err(invalid("a fragment (#…) is not accepted"));
    }
    Ok(url)
}

/// Why `ip` is not a public address (`None`: it is).
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => non_public_v4(v4),
            None => non_public_v6(v6),
        },
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(if ip.is_unspecified() || a == 0 {
        "unspecified"
    } else if ip.is_loopback() {
        "loopback"
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        "private"
    } else if ip.is_link_local() {
        "link-local"
    } else if ip.is_multicast() || ip.is_broadcast() || a >= 240 {
        "multicast or reserved"
    } else if ip.is_documentation() || (a == 198 && (b == 18 || b == 19)) {
        "documentation or benchmarking"
    } else {
        return None;
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(if ip.is_unspecified() {
        "unspecified"
    } else if ip.is_loopback() {
        "loopback"
    } else if first & 0xfe00 == 0xfc00 {
        "private"
    } else if first & 0xffc0 == 0xfe80 {
        "link-local"
    } else if ip.is_multicast() {
        "multicast or reserved"
    } else if first == 0x2001 && ip.segments()[1] == 0x0db8 {
        "documentation or benchmarking"
    } else if ip.to_ipv4().is_some() {
        // IPv4-compatible (::a.b.c.d) and other embeddings: not a public v6 address.
        "multicast or reserved"
    } else {
        return None;
    })
}

/// Checks every address: all must be public unless `allow_private`; at least one is needed.
pub fn check_addresses(addrs: &[SocketAddr], allow_private: bool) -> Result<(), Error> {
    if addrs.is_empty() {
        return Err(Error::WebhookTargetRefused(
            "the host has no address".to_owned(),
        ));
    }
    if allow_private {
        return Ok(());
    }
    for addr in addrs {
        if let Some(why) = non_public(addr.ip()) {
            return Err(Error::WebhookTargetRefused(format!(
                "the host resolves to a {why} address ({}); start the service with \
                 --webhook-allow-private-targets to allow it",
                addr.ip()
            )));
        }
    }
    Ok(())
}

/// The addresses of `host`:`port` (bounded wait and count), each checked.
pub async fn resolve(host: &str, port: u16, allow_private: bool) -> Result<Vec<SocketAddr>, Error> {
    let refused = |why: String| Error::WebhookTargetRefused(why);
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            let lookup = tokio::net::lookup_host((host, port));
            match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                Ok(Ok(found)) => found.take(MAX_ADDRESSES).collect(),
                Ok(Err(e)) => return Err(refused(format!("the host does not resolve: {e}"))),
                Err(_) => return Err(refused("the host did not resolve in time".to_owned())),
            }
        }
    };
    check_addresses(&addrs, allow_private)?;
    Ok(addrs)
}

/// Resolves and checks a parsed URL's host.
pub async fn check_url(url: &Url, allow_private: bool) -> Result<Vec<SocketAddr>, Error> {
    let port = url.port_or_known_default().unwrap_or(443);
    match url.host() {
        Some(Host::Ipv4(ip)) => resolve(&ip.to_string(), port, allow_private).await,
        Some(Host::Ipv6(ip)) => resolve(&ip.to_string(), port, allow_private).await,
        Some(Host::Domain(name)) => resolve(name, port, allow_private).await,
        None => Err(Error::WebhookTargetRefused("a host is needed".to_owned())),
    }
}

/// What of a URL may be logged: scheme, host, port and path; never the query (it may carry a
/// receiver's own token).
pub fn redacted(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => format!(
            "{}://{}{}{}",
            u.scheme(),
            u.host_str().unwrap_or(""),
            u.port().map(|p| format!(":{p}")).unwrap_or_default(),
            u.path()
        ),
        Err(_) => "<invalid url>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_without_userinfo() {
        assert!(parse_url("https://example.com/hook?x=1").is_ok());
        assert!(parse_url("http://127.0.0.1:8080/").is_ok());
        for bad in [
            "",
            "example.com/hook",
            "ftp://example.com/",
            "file:///etc/passwd",
            "https://user:pw@example.com/",
            "https://user@example.com/",
            "https://example.com/#frag",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        let long = format!(
            "https://example.com/{}",
            "a".repeat(super::super::MAX_URL_BYTES)
        );
        assert!(parse_url(&long).is_err());
    }

    #[test]
    fn non_public_addresses_are_named() {
        for (ip, why) in [
            ("127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "private"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "private"),
            ("fe80::1", "link-local"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
        ] {
            assert_eq!(non_public(ip.parse().expect("ip")), Some(why), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"] {
            assert_eq!(non_public(ip.parse().expect("ip")), None, "{ip}");
        }
    }

    #[test]
    fn logs_never_see_the_query() {
        assert_eq!(
            redacted("https://example.com:8443/a/b?token=secret"),
            "https://example.com:8443/a/b"
        );
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_allowed() {
        let url = parse_url("http://127.0.0.1:9/hook").expect("url");
        assert!(matches!(
            check_url(&url, false).await,
            Err(Error::WebhookTargetRefused(_))
        ));
        assert!(check_url(&url, true).await.is_ok());
        let named = parse_url("http://localhost:9/hook").expect("url");
        assert!(check_url(&named, false).await.is_err());
    }
}
