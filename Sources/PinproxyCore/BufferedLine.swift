/// The result of asking a `BufferEvent` for one line of its input.
public enum BufferedLine {
    case line(String)
    case incomplete
    case tooLong
    case notText
}
