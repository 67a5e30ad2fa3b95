extension String {
    /// The text a C function wrote into `buffer`, up to its NUL (all of it when there is none),
    /// bytes that are not UTF-8 replaced.
    package init(nulTerminated buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
