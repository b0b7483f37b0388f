//! A2A v1.0's timestamps (proto3 JSON's `google.protobuf.Timestamp`: RFC 3339, UTC) to and
//! from the engine's Unix milliseconds. Days and dates convert with H. Hinnant's
//! `days_from_civil` / `civil_from_days`, so no calendar crate is needed for two functions.

/// Unix milliseconds as RFC 3339 in UTC with milliseconds: `2026-12-03T18:25:00.123Z`.
pub fn format(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let days = i64::try_from(seconds / 86_400).unwrap_or(i64::MAX);
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60,
        unix_ms % 1000
    )
}

/// RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`) as Unix milliseconds; `Err` says
/// what is wrong. Times before 1970 are refused: no engine time is before them.
pub fn parse(text: &str) -> Result<u64, String> {
    let wrong = || format!("`{text}` is not an RFC 3339 timestamp like 2026-12-03T18:25:00Z");
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return Err(wrong());
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return Err(wrong());
    }
    let number = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let digits = text.get(range).ok_or_else(wrong)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(wrong());
        }
        digits.parse().map_err(|_| wrong())
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err(wrong());
    }
    if second > 60 {
        return Err(wrong());
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(wrong());
        }
        let first3: String = fraction[..digits]
            .chars()
            .chain("000".chars())
            .take(3)
            .collect();
        millis = first3.parse::<i64>().map_err(|_| wrong())?;
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return Err(wrong()),
            };
            let hours: i64 = rest[1..3].parse().map_err(|_| wrong())?;
            let minutes: i64 = rest[4..6].parse().map_err(|_| wrong())?;
            sign * (hours * 60 + minutes)
        }
        _ => return Err(wrong()),
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    u64::try_from(seconds * 1000 + millis)
        .map_err(|_| format!("`{text}` is before 1970-01-01T00:00:00Z"))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian date `days` after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_rfc_3339_in_utc() {
        assert_eq!(format(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format(1_796_322_300_123), "2026-12-03T18:25:00.123Z");
        assert_eq!(format(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn rfc_3339_parses_back_with_fractions_and_offsets() {
        assert_eq!(parse("2026-12-03T18:25:00.123Z"), Ok(1_796_322_300_123));
        assert_eq!(parse("2026-12-03T18:25:00Z"), Ok(1_796_322_300_000));
        assert_eq!(parse("2026-12-03T19:25:00+01:00"), Ok(1_796_322_300_000));
        assert_eq!(parse("2026-12-03T18:25:00.1234567Z"), Ok(1_796_322_300_123));
        for millis in [0, 951_782_400_000, 1_796_322_300_123, 4_102_444_800_999] {
            assert_eq!(parse(&format(millis)), Ok(millis));
        }
        for wrong in [
            "",
            "2026-12-03",
            "2026-13-03T00:00:00Z",
            "2026-12-03T18:25:00",
            "1969-12-31T23:59:59Z",
            "2026-12-03T18:25:00.Z",
        ] {
            assert!(parse(wrong).is_err(), "{wrong}");
        }
    }
}
