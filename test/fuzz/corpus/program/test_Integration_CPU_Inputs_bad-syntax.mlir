func.func @main( {
