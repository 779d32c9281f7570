//! CSV files built in memory through the `csv` crate: a field holding a comma, a quote or a
//! line break is quoted (RFC 4180), so a GPU or strategy name cannot shift a column. Numbers
//! arrive formatted: each file keeps the precision its columns promise (SPEC.md).

/// One CSV file: a header, then rows of the same width.
#[derive(Debug)]
pub struct CsvTable {
    writer: csv::Writer<Vec<u8>>,
}

impl CsvTable {
    pub fn new<I, T>(header: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        let mut table = CsvTable {
            writer: csv::Writer::from_writer(Vec::new()),
        };
        table.row(header);
        table
    }

    /// Appends a row. Rows narrower or wider than the header are a bug in the caller.
    pub fn row<I, T>(&mut self, fields: I)
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        if let Err(e) = self.writer.write_record(fields) {
            // Memory takes every write; only a row of the wrong width fails.
            panic!("a CSV row that does not fit its header: {e}");
        }
    }

    /// The file's text.
    pub fn finish(self) -> String {
        let bytes = match self.writer.into_inner() {
            Ok(bytes) => bytes,
            Err(e) => panic!("flushing a CSV table to memory: {}", e.error()),
        };
        // Every field came in as UTF-8 and quoting adds only ASCII.
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_fields_are_written_as_they_are_and_awkward_ones_are_quoted() {
        let mut t = CsvTable::new(["name", "value"]);
        t.row(["h100", "1.500"]);
        t.row(["a,b", "say \"hi\""]);
        assert_eq!(
            t.finish(),
            "name,value\nh100,1.500\n\"a,b\",\"say \"\"hi\"\"\"\n"
        );
    }

    #[test]
    fn a_row_of_the_wrong_width_is_caught() {
        let result = std::panic::catch_unwind(|| {
            let mut t = CsvTable::new(["a", "b"]);
            t.row(["only one"]);
        });
        assert!(result.is_err());
    }
}
