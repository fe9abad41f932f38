Bhead.weight_gradJúÍÍ½Ê´½®ê°»ü•=
=İs;