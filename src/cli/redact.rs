//! Redis URLs as they can be shown in errors and logs: without their passwords.

/// `url` as it can be shown: a password in it (`redis://user:secret@host`, `?pass=secret`) is
/// replaced by `***`.
pub(super) fn without_password(url: &str) -> String {
    let mut shown = url.to_owned();
    if let Some((scheme, rest)) = shown.split_once("://")
        && let Some((userinfo, host)) = rest.split_once('@')
        && let Some((user, _)) = userinfo.split_once(':')
    {
        shown = format!("{scheme}://{user}:***@{host}");
    }
    for key in [
        "?pass=",
        "&pass=",
        "?password=",
        "&password=",
        "?sentinel_password=",
        "&sentinel_password=",
    ] {
        // Every occurrence, in any case: Redis URLs are read case-insensitively by some
        // clients, and a parameter given twice must not show its second value.
        let mut from = 0;
        while let Some(start) = shown[from..].to_ascii_lowercase().find(key) {
            let value = from + start + key.len();
            let end = shown[value..]
                .find('&')
                .map_or(shown.len(), |end| value + end);
            shown.replace_range(value..end, "***");
            from = value + "***".len();
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_a_redis_url_is_never_shown() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            (
                "redis://user:s3cret@host:6379/0",
                "redis://user:***@host:6379/0",
            ),
            ("rediss://:s3cret@host/", "rediss://:***@host/"),
            (
                "redis+unix:///run/redis.sock?user=u&pass=s3cret&db=1",
                "redis+unix:///run/redis.sock?user=u&pass=***&db=1",
            ),
            (
                "redis+unix:///run/redis.sock?pass=s3cret",
                "redis+unix:///run/redis.sock?pass=***",
            ),
            (
                "redis://host/?password=s3cret",
                "redis://host/?password=***",
            ),
            (
                "redis+sentinel://app:s3cret@h1,h2/m?SENTINEL_PASSWORD=x&sentinel_password=y",
                "redis+sentinel://app:***@h1,h2/m?SENTINEL_PASSWORD=***&sentinel_password=***",
            ),
        ] {
            assert_eq!(without_password(url), shown);
        }
    }
}
